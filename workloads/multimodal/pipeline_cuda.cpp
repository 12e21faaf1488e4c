// The multimodal pipeline on the cuda backend (pipeline.hpp): the GPU preprocessing kernels
// (preprocess_gpu.hpp), the CUDA vision encoder and projector (vit_gpu.hpp) and the cuda llm engine,
// all on the backend's stream; the image tokens stay on the device from the projector to the
// prefill. Decode runs on the CPU pool (the images' bytes come from files).
#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "workloads/llm/llm_cuda.hpp"
#include "workloads/multimodal/pipeline.hpp"
#include "workloads/multimodal/preprocess_gpu.hpp"
#include "workloads/multimodal/vit_gpu.hpp"

namespace itera::mm {
namespace {

class cuda_vision final : public vision_side {
 public:
  cuda_vision(backend& dev, const pipeline_case& c)
      : m_pre(dev, c.preprocess), m_vit(dev, random_vit_weights(c.vision, dtype::bf16, c.seed), options(c)) {}

  void preprocess(const std::vector<const rgb_image*>& images) override { (void)m_pre.enqueue(images); }
  std::uint64_t bytes_uploaded() const override { return m_pre.host_bytes_uploaded(); }
  void prepare(std::int64_t views) override { m_vit.prepare(views); }

  image_tokens encode(std::int64_t views, stage_recorder& rec) override {
    if (views != static_cast<std::int64_t>(m_pre.views()))
      throw std::logic_error(fmt::format("cuda vision: {} views asked, {} preprocessed", views, m_pre.views()));
    const std::uint16_t* features = m_vit.encode(m_pre.patches(), views, &rec);
    return {m_vit.project(features, views, &rec), true};
  }

  vit_engine_memory memory() const { return m_vit.memory(); }
  std::string precision_note() const { return m_vit.precision_note(); }

 private:
  static vit_engine_options options(const pipeline_case& c) {
    vit_engine_options o;
    o.max_images = c.batch * c.images;
    o.fc1_bf16_sums = c.fc1_bf16_sums;
    return o;
  }
  gpu_preprocessor m_pre;
  gpu_vit m_vit;
};

}  // namespace

void run_pipeline_cuda(case_state& st) {
  const pipeline_case c = read_pipeline_case(st);
  backend& dev = st.device();
  memory_tracker& tracker = dev.memory_tracking();
  const std::uint64_t baseline = tracker.current();
  (void)tracker.exchange_peak(baseline);
  cuda_vision vision(dev, c);
  llm::engine_options o;
  o.batch = c.batch;
  o.max_context = c.context_length() + c.output;
  o.max_prompt = c.context_length();
  o.prefill_batch = c.batch;
  llm::cuda_engine lm(dev, c.language, c.seed, o);
  st.set_field("precision.vision", vision.precision_note());
  run_pipeline(st, c, vision, lm);
  lm.synchronize();
  const auto v = vision.memory();
  const auto e = lm.memory();
  st.add_metric("memory/vision/weights", static_cast<double>(v.weights), "B");
  st.add_metric("memory/vision/activations", static_cast<double>(v.activations + v.workspace), "B");
  st.add_metric("memory/engine/weights", static_cast<double>(e.weights), "B");
  st.add_metric("memory/engine/kv_cache", static_cast<double>(e.kv_cache), "B");
  st.add_metric("memory/engine/activations", static_cast<double>(e.activations), "B");
  st.add_metric("memory/measured_peak", static_cast<double>(tracker.peak() - baseline), "B");
}

}  // namespace itera::mm
