// The vision_encoder workload: axes, suite, what both backends share (weights, inputs, the
// reference, the declared work, the figures), and the cpu backend (vision_encoder.hpp).
#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "itera/core/errors.hpp"
#include "workloads/gemm/gemm.hpp"
#include "workloads/multimodal/vision_encoder.hpp"

namespace itera::mm {
namespace {

constexpr std::uint64_t patch_seed_salt = 0x9A7C4E5ull;

std::string joined(const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, ", ")); }

// The model a case runs, as a key: cases that share it share weights and reference outputs.
std::string model_key(const vit_case& c, dtype storage) {
  const vit_config& k = c.config;
  return fmt::format("{}|{}|{}|{} {} {} {} {} {} {} {} {} {} {} {} {}|{}", c.checkpoint, llm::dtype_name(storage), c.seed,
                     k.name, k.layers, k.hidden, k.heads, k.mlp, k.patch, k.image, k.channels, k.class_token,
                     k.patch_bias, activation_name(k.activation), norm_name(k.norm), k.llm_hidden,
                     select_name(k.select));
}

// random_vit_weights, the tensors drawn on every core (each is a pure function of its name).
vit_weights draw_weights(const vit_config& c, dtype storage, std::uint64_t seed) {
  vit_weights w = zero_vit_weights(c, storage);
  const auto specs = vit_tensor_specs(c);
  std::atomic<std::size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  const auto work = [&] {
    try {
      for (std::size_t i = next++; i < specs.size(); i = next++)
        w.tensor(specs[i]) = random_vit_tensor(specs[i], c, storage, seed);
    } catch (...) {
      const std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = specs.size();
    }
  };
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return w;
}

}  // namespace

workload_decl vision_encoder_declaration() {
  workload_decl w;
  w.name = "vision_encoder";
  w.version = vision_encoder_version;
  w.summary = "ViT encoder + LLaVA projector on patchified images on the device; images/s, encoder GEMM FLOP/s";
  w.axes = {
      {"preset", axis_kind::string, "clip-vit-large-patch14", "encoder shape", vit_preset_names(), 0, 0},
      {"shape", axis_kind::string, "preset",
       "shape fields over the preset: 'layers=12;image=336' (" + joined(vit_shape_fields()) + ")", {}, 0, 0},
      {"checkpoint", axis_kind::string, "random",
       "'random' (seeded weights at a trained model's scale) or a Hugging Face folder (config.json + *.safetensors: "
       "CLIP, SigLIP or LLaVA)", {}, 0, 0},
      {"batch", axis_kind::integer, "1,32,128", "images per encode", {}, 1, 65535},
      {"weights", axis_kind::string, "bf16", "weight storage (the cuda engine: bf16)", {"bf16", "fp16", "fp32"}, 0, 0},
      {"activations", axis_kind::string, "bf16",
       "activation precision between operations (the cuda engine: bf16; fp32 on the cpu reference)", {"bf16", "fp32"},
       0, 0},
      {"check_images", axis_kind::integer, "2",
       "images of the batch checked against the cpu reference before timing (0: none)", {}, 0, 65535},
      {"stages", axis_kind::string, "kinds",
       "stage table: kinds (layers/fc1 over all layers) or layers (layer.3.fc1)", {"kinds", "layers"}, 0, 0},
      {"graph", axis_kind::string, "no", "cuda: replay encode + project as one CUDA graph (no per-stage times)",
       {"no", "yes"}, 0, 0},
      {"fc1_sums", axis_kind::string, "bf16",
       "quick_gelu and gelu: fc1's sums rounded to bf16 by the GEMM before the activation, as PyTorch runs a bf16 "
       "Linear then its activation (bf16), or kept in fp32 until the activation (fp32: one rounding, more bytes)",
       {"fp32", "bf16"}, 0, 0},
      {"seed", axis_kind::integer, "1", "weights and input patches", {}, 0, std::int64_t{1} << 62},
  };
  w.suite = [](const backend& dev) -> std::vector<axis_overrides> {
    if (dev.name() == "cpu") return {{{"preset", "tiny,tiny-siglip"}, {"batch", "1,4"}}};
    return {{{"preset", "clip-vit-large-patch14"}, {"batch", "1,32,128"}},
            {{"preset", "siglip-so400m-patch14-384"}, {"batch", "32"}}};
  };
  return w;
}

vit_case read_vit_case(const case_state& st) {
  vit_case c;
  c.checkpoint = st.get_string("checkpoint");
  c.seed = static_cast<std::uint64_t>(st.get_int("seed"));
  const vit_config base = vit_preset(st.get_string("preset"));
  if (c.checkpoint == "random") {
    c.config = apply_vit_shape(base, st.get_string("shape"));
  } else {
    if (st.get_string("shape") != "preset")
      throw usage_error("axis shape: a checkpoint brings its own shape; leave --axis shape at 'preset'");
    if (!std::filesystem::is_directory(c.checkpoint))
      throw usage_error(fmt::format("axis checkpoint: '{}' is not a folder; give 'random' or a Hugging Face folder "
                                    "(config.json + *.safetensors)",
                                    c.checkpoint));
    c.config = read_vit_hf_config(std::filesystem::path(c.checkpoint) / "config.json",
                                  projector_shape{base.llm_hidden, base.select});
  }
  c.weights = llm::parse_dtype(st.get_string("weights"));
  c.activations = llm::parse_dtype(st.get_string("activations"));
  c.batch = st.get_int("batch");
  c.check_images = std::min(st.get_int("check_images"), c.batch);
  c.stages = parse_stage_names(st.get_string("stages"));
  c.graph = st.get_string("graph") == "yes";
  // gelu_tanh's fc1 runs in cuBLASLt's epilogue, its sums fp32 whatever the axis says.
  c.fc1_bf16_sums = st.get_string("fc1_sums") == "bf16" && c.config.activation != vit_activation::gelu_tanh;
  return c;
}

std::shared_ptr<const vit_weights> case_weights(const vit_case& c, dtype storage) {
  static std::string held_key;
  static std::shared_ptr<const vit_weights> held;
  const std::string key = model_key(c, storage);
  if (held && held_key == key) return held;
  held.reset();  // one model in memory at a time
  if (c.checkpoint == "random") {
    held = std::make_shared<const vit_weights>(draw_weights(c.config, storage, c.seed));
  } else {
    const vit_checkpoint ck(c.checkpoint, projector_shape{c.config.llm_hidden, c.config.select});
    held = std::make_shared<const vit_weights>(ck.load(storage, c.seed));
  }
  held_key = key;
  return held;
}

std::vector<float> random_patches(const vit_config& c, std::int64_t images, std::uint64_t seed) {
  const auto per_image = static_cast<std::uint64_t>(c.patches() * c.patch_dim());
  std::vector<float> out(static_cast<std::size_t>(per_image * static_cast<std::uint64_t>(images)));
  const std::uint64_t s = seed ^ patch_seed_salt;
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = 2.0f * gemm::random_value(s, i);
  return out;
}

std::shared_ptr<const vit_reference::output> reference_outputs(const vit_case& c, const vit_weights& w, dtype activations,
                                                               std::int64_t images) {
  static std::string held_key;
  static std::shared_ptr<const vit_reference::output> held;
  const std::string key = fmt::format("{}|{}|{}|{}", model_key(c, w.storage), llm::dtype_name(activations), images,
                                      c.fc1_bf16_sums);
  if (held && held_key == key) return held;
  vit_reference ref(w, activations);
  ref.set_fc1_bf16_sums(c.fc1_bf16_sums && activations == dtype::bf16);
  const auto patches = random_patches(c.config, images, c.seed);
  vit_reference::output out;
  out.features = ref.encode_patches(patches, images);
  out.image_tokens = ref.project(out.features);
  held = std::make_shared<const vit_reference::output>(std::move(out));
  held_key = key;
  return held;
}

bool record_verification(case_state& st, const token_tensor& features, const token_tensor& image_tokens,
                         const vit_reference::output& ref, const std::string& against) {
  const double fe = normalised_error(features.values, ref.features.values);
  const double te = normalised_error(image_tokens.values, ref.image_tokens.values);
  const double error = std::max(fe, te);
  const bool passed = fe <= vit_tolerance && te <= vit_tolerance;  // NaN compares false
  st.add_metric("verification/features_error", fe, "ratio");
  st.add_metric("verification/image_tokens_error", te, "ratio");
  st.set_verification(passed, error, vit_tolerance,
                      fmt::format("{} on the first {} image(s) of the batch: normalised error of the features {:.3g}, "
                                  "of the image tokens {:.3g}",
                                  against, ref.features.images, fe, te));
  return passed;
}

void declare_case(case_state& st, const vit_case& c) {
  const auto stages = vit_stages(c.config, c.weights, c.activations);
  const vit_work w = sum_work(stages, c.batch);
  double read = w.weight_bytes, written = 0;
  for (const auto& s : stages) {
    read += static_cast<double>(c.batch) * s.bytes_read;
    written += static_cast<double>(c.batch) * s.bytes_written;
  }
  st.set_work(w.flops(), read, written);
  // The parts of the FLOPs, per repetition (the GEMMs' and the attention's FLOP/s come from them).
  const vit_work encoder = sum_work(stages, c.batch, vit_part::encoder);
  st.set_detail("work.encoder_gemm_flops", fmt::format("{:.0f}", encoder.gemm_flops));
  st.set_detail("work.attention_flops", fmt::format("{:.0f}", encoder.attention_flops));
  st.set_detail("work.encoder_other_flops", fmt::format("{:.0f}", encoder.other_flops));
  st.set_detail("work.projector_flops", fmt::format("{:.0f}", sum_work(stages, c.batch, vit_part::projector).flops()));
  st.set_field("model", c.config.name);
  st.set_field("tokens", std::to_string(c.config.tokens()));
  st.set_field("precision.weights", std::string(llm::dtype_name(c.weights)));
  st.set_field("precision.activations", std::string(llm::dtype_name(c.activations)));
  st.set_field("precision.accumulate", "fp32");
  st.set_field("precision.fc1_sums", c.fc1_bf16_sums ? "bf16" : "fp32");
}

void add_vit_metrics(case_record& r, const ceiling_table& ceilings, const vit_case& c) {
  if (!r.device_stats || r.device_stats->median <= 0) return;
  const double per_batch_s = r.device_stats->median * 1e-9;
  r.metrics.push_back({"throughput/images_per_s", static_cast<double>(c.batch) / per_batch_s, "images/s"});
  if (r.stages.empty() || r.device_ns.empty()) return;
  // Each repetition enters its stages once; the median repetition's time, as the case's rate and
  // the ceiling (case_record::stages_per_repetition_ns).
  const auto stages = vit_stages(c.config, c.weights, c.activations);
  const vit_work w = sum_work(stages, c.batch, vit_part::encoder);
  std::vector<std::string> gemm_paths, attention_paths, projector_paths;
  for (const auto& s : stages) {
    const bool projector = s.kind == vit_stage_kind::projector_fc1 || s.kind == vit_stage_kind::projector_fc2;
    const std::string path = stage_path(s, c.stages);
    auto& into = projector ? projector_paths : s.kind == vit_stage_kind::attention ? attention_paths : gemm_paths;
    if (!projector && s.gemm_m == 0 && s.kind != vit_stage_kind::attention) continue;
    if (std::find(into.begin(), into.end(), path) == into.end()) into.push_back(path);
  }
  const auto seconds = [&](const std::vector<std::string>& paths) {
    const double ns = r.stages_per_repetition_ns(paths);
    return ns < 0 ? -1.0 : ns * 1e-9;
  };
  const double gemm_s = seconds(gemm_paths), attention_s = seconds(attention_paths),
               projector_s = seconds(projector_paths);
  // The encoder alone (the target is for it): the repetition less the projector's stages.
  if (projector_s >= 0 && per_batch_s > projector_s)
    r.metrics.push_back(
        {"throughput/encoder_images_per_s", static_cast<double>(c.batch) / (per_batch_s - projector_s), "images/s"});
  if (gemm_s > 0) {
    const double rate = w.gemm_flops / gemm_s;
    r.metrics.push_back({"throughput/encoder_gemm_flops", rate, "FLOP/s"});
    r.metrics.push_back({"time/encoder_gemm_share", gemm_s / per_batch_s, "fraction"});
    add_utilisation(r, ceilings, "encoder_gemm/", fmt::format("gemm.{}", llm::dtype_name(c.weights)), rate);
  }
  if (attention_s > 0) r.metrics.push_back({"throughput/attention_flops", w.attention_flops / attention_s, "FLOP/s"});
}

void run_vision_encoder_cpu(case_state& st) {
  const vit_case c = read_vit_case(st);
  if (c.activations != dtype::fp32 && c.activations != dtype::bf16)
    throw usage_error(fmt::format("axis activations: the cpu reference runs fp32 or bf16, not {}",
                                  llm::dtype_name(c.activations)));
  const auto weights = case_weights(c, c.weights);
  vit_reference ref(*weights, c.activations);
  ref.set_fc1_bf16_sums(c.fc1_bf16_sums && c.activations == dtype::bf16);
  declare_case(st, c);
  st.set_detail("precision.as_run", "cpu reference: OpenBLAS sgemm in fp32 for every product, LayerNorm statistics in "
                                    "double; " +
                                        std::string(c.activations == dtype::bf16
                                                        ? "activations rounded to bf16 where a GPU engine stores them"
                                                        : "activations in fp32"));
  // bf16 activations: their drift from fp32 activations on the same weights.
  if (st.options().verify && c.check_images > 0 && c.activations == dtype::bf16) {
    const auto mine = reference_outputs(c, *weights, dtype::bf16, c.check_images);
    const auto wide = reference_outputs(c, *weights, dtype::fp32, c.check_images);
    if (!record_verification(st, mine->features, mine->image_tokens, *wide, "cpu reference with fp32 activations"))
      throw std::runtime_error(fmt::format("vision_encoder: bf16 activations drift more than {} from fp32 ones",
                                           vit_tolerance));
  }
  const auto patches = random_patches(c.config, c.batch, c.seed);
  st.on_finish([c, &st](case_record& r) { add_vit_metrics(r, st.ceilings(), c); });
  st.exec([&] {
    const auto features = ref.encode_patches(patches, c.batch);
    const auto image_tokens = ref.project(features);
    if (image_tokens.values.empty()) throw std::logic_error("vision_encoder: the projector returned nothing");
  });
}

}  // namespace itera::mm
