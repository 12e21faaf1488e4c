// The multimodal pipeline on the cuda backend (pipeline.hpp): the GPU preprocessing kernels
// (preprocess_gpu.hpp), the CUDA vision encoder and projector (vit_gpu.hpp) and the cuda llm engine,
// all on the backend's stream; the image tokens stay on the device from the projector to the
// prefill. Decode runs on the CPU pool, or (decode=gpu) with nvJPEG into device memory that the
// preprocessing reads in place.
#include <algorithm>
#include <memory>
#include <span>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "workloads/llm/llm_cuda.hpp"
#include "workloads/multimodal/decode_gpu.hpp"
#include "workloads/multimodal/pipeline.hpp"
#include "workloads/multimodal/preprocess_gpu.hpp"
#include "workloads/multimodal/vit_gpu.hpp"

namespace itera::mm {
namespace {

class cuda_vision final : public vision_side {
 public:
  cuda_vision(backend& dev, const pipeline_case& c)
      : m_dev(dev),
        m_max_images(static_cast<std::size_t>(c.batch * c.images)),
        m_pre(dev, c.preprocess),
        m_vit(dev, random_vit_weights(c.vision, dtype::bf16, c.seed), options(c)) {}

  void decode(const read_batch& files, std::vector<char>& ok, std::vector<image_error>& errors) override {
    if (!m_decoder) {
      if (const std::string why = nvjpeg_unavailable_reason(); !why.empty()) throw case_skipped("decode=gpu: " + why);
      m_decoder = std::make_unique<gpu_jpeg_decoder>(m_dev, m_max_images);
    }
    // Only the files that were read go to the decoder; its indices are mapped back.
    std::vector<std::span<const std::uint8_t>> spans;
    std::vector<std::size_t> file_of;
    for (std::size_t i = 0; i < files.bytes.size(); ++i) {
      if (!files.ok[i]) continue;
      spans.emplace_back(files.bytes[i]);
      file_of.push_back(i);
    }
    const gpu_decode_result r = m_decoder->decode(spans, image_limits{});
    ok.assign(files.bytes.size(), 0);
    m_images.assign(files.bytes.size(), {});
    errors = files.errors;  // the read failures
    std::vector<char> bad(spans.size(), 0);
    for (std::size_t b = 0; b < r.bad.size(); ++b) {
      bad[r.bad[b]] = 1;
      errors.push_back({file_of[r.bad[b]], "decode", r.bad_reasons[b]});
    }
    for (std::size_t k = 0; k < spans.size(); ++k) {
      if (bad[k]) continue;
      ok[file_of[k]] = 1;
      m_images[file_of[k]] = {r.widths[k], r.heights[k], r.offsets[k]};
    }
    std::sort(errors.begin(), errors.end(), [](const image_error& a, const image_error& b) { return a.index < b.index; });
  }

  void preprocess_decoded(const std::vector<std::size_t>& which) override {
    if (!m_decoder) throw std::logic_error("cuda vision: preprocess_decoded() before decode()");
    std::vector<gpu_preprocessor::device_image> images;
    for (const auto f : which) images.push_back(m_images.at(f));
    (void)m_pre.enqueue_device(m_decoder->pixels(), images);
  }

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
  backend& m_dev;
  std::size_t m_max_images;
  gpu_preprocessor m_pre;
  gpu_vit m_vit;
  std::unique_ptr<gpu_jpeg_decoder> m_decoder;                // decode=gpu, made by the first decode
  std::vector<gpu_preprocessor::device_image> m_images;       // per file of the last decode
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
