// The vision_encoder workload on the cuda backend: the engine (vit_gpu.hpp) on random patches
// already on the device, checked against the cpu reference, then encode + project timed.
#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "workloads/multimodal/vision_encoder.hpp"
#include "workloads/multimodal/vit_gpu.hpp"

namespace itera::mm {

void run_vision_encoder_cuda(case_state& st) {
  const vit_case c = read_vit_case(st);
  if (c.weights != dtype::bf16 || c.activations != dtype::bf16)
    throw case_skipped(fmt::format("the cuda engine runs bf16 weights and activations; weights={} activations={} run "
                                   "on the cpu backend",
                                   llm::dtype_name(c.weights), llm::dtype_name(c.activations)));
  backend& dev = st.device();
  const auto weights = case_weights(c, dtype::bf16);

  memory_tracker& tracker = dev.memory_tracking();
  const std::uint64_t baseline = tracker.current();
  (void)tracker.exchange_peak(baseline);
  vit_engine_options o;
  o.max_images = c.batch;
  o.fc1_bf16_sums = c.fc1_bf16_sums;
  gpu_vit eng(dev, *weights, o);  // case_skipped when it does not fit
  const std::uint16_t* patches = eng.upload_patches(random_patches(c.config, c.batch, c.seed), c.batch);
  eng.prepare(c.batch);
  for (const auto& [gemm, choice] : eng.gemm_choices()) st.set_detail("gemm." + gemm, choice);
  st.set_detail("precision.as_run", eng.precision_note());
  declare_case(st, c);

  if (st.options().verify && c.check_images > 0) {
    (void)eng.project(eng.encode(patches, c.batch), c.batch);
    const auto features = eng.download_features(c.check_images);
    const auto image_tokens = eng.download_image_tokens(c.check_images);
    const auto ref = reference_outputs(c, *weights, dtype::bf16, c.check_images);
    if (!record_verification(st, features, image_tokens, *ref, "cpu reference (bf16 activations, same weights)"))
      throw std::runtime_error(fmt::format("vision_encoder {} on {}: the output differs from the cpu reference by more "
                                           "than {} (features {:.3g}, image tokens {:.3g})",
                                           c.config.name, dev.device_name(), vit_tolerance,
                                           normalised_error(features.values, ref->features.values),
                                           normalised_error(image_tokens.values, ref->image_tokens.values)));
  }

  const auto mem = eng.memory();
  st.add_metric("memory/engine/weights", static_cast<double>(mem.weights), "B");
  st.add_metric("memory/engine/activations", static_cast<double>(mem.activations), "B");
  st.add_metric("memory/measured_peak", static_cast<double>(tracker.peak() - baseline + mem.workspace), "B");
  st.set_ceiling_key(fmt::format("gemm.{}", llm::dtype_name(c.weights)));
  st.on_finish([c, &st](case_record& r) { add_vit_metrics(r, st.ceilings(), c); });
  if (c.graph) {
    eng.capture(patches, c.batch);
    st.exec([&] { eng.run_graph(); });
  } else {
    stage_recorder& rec = st.stages();
    st.exec([&] { (void)eng.project(eng.encode(patches, c.batch, &rec, c.stages), c.batch, &rec, c.stages); });
  }
  eng.synchronize();
}

}  // namespace itera::mm
