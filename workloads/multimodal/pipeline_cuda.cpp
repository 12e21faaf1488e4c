// The multimodal pipeline on the cuda backend (pipeline.hpp): the GPU preprocessing kernels
// (preprocess_gpu.hpp), the CUDA vision encoder and projector (vit_gpu.hpp) and the cuda llm engine,
// all on the backend's stream; the image tokens stay on the device from the projector to the
// prefill. Decode runs on the CPU pool, or (decode=gpu) with nvJPEG into device memory that the
// preprocessing reads in place. residency=staged: both engines' memory is evictable (CUDA virtual
// memory management: the same addresses each time, so plans and graphs survive) and their weights
// wait in a weight_store between uses.
#include <algorithm>
#include <memory>
#include <span>

#include <unistd.h>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/memory.hpp"
#include "src/cuda/weight_store.hpp"
#include "workloads/llm/llm_cuda.hpp"
#include "workloads/llm/scenarios.hpp"
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
        m_vit(dev, random_vit_weights(c.vision, dtype::bf16, c.seed), options(c, c.batch)) {}

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
  gpu_vit& engine() { return m_vit; }

  static vit_engine_options options(const pipeline_case& c, std::int64_t batch) {
    vit_engine_options o;
    o.max_images = batch * c.images;
    o.fc1_bf16_sums = c.fc1_bf16_sums;
    o.evictable = c.staged;
    return o;
  }

 private:
  backend& m_dev;
  std::size_t m_max_images;
  gpu_preprocessor m_pre;
  gpu_vit m_vit;
  std::unique_ptr<gpu_jpeg_decoder> m_decoder;                // decode=gpu, made by the first decode
  std::vector<gpu_preprocessor::device_image> m_images;       // per file of the last decode
};

llm::engine_options language_options(const pipeline_case& c, std::int64_t batch) {
  llm::engine_options o;
  o.batch = batch;
  o.max_context = c.context_length() + c.output;
  o.max_prompt = c.context_length();
  o.prefill_batch = batch;
  o.evictable = c.staged;
  o.weights = c.language_weights;
  o.kv = c.language_kv;
  return o;
}

// A fresh cuda engine as a logits model whose prefill stages the image rows (precision_check).
class image_prompt_logits final : public llm::logits_model {
 public:
  image_prompt_logits(std::unique_ptr<llm::cuda_engine> eng, const llm::embedding_rows& rows)
      : m_eng(std::move(eng)), m_rows(rows) {}
  std::int64_t sequences() const override { return m_eng->slots(); }
  std::int64_t vocab() const override { return m_eng->config().vocab; }
  std::vector<float> prefill(std::span<const std::int32_t> tokens, std::int64_t prompt) override {
    m_eng->stage_prompts(tokens);
    m_eng->stage_embeddings(m_rows);
    m_eng->prefill_staged(0, m_eng->slots(), prompt);
    return m_eng->read_prefill_logits(m_eng->slots());
  }
  std::vector<float> step(std::span<const std::int32_t> tokens) override { return m_eng->decode_step(tokens); }

 private:
  std::unique_ptr<llm::cuda_engine> m_eng;
  llm::embedding_rows m_rows;
};

// The case's weights and KV cache against bf16 weights and a bf16 cache, both on this card, the
// same random weights (seed).
class cuda_precision_check final : public precision_check {
 public:
  cuda_precision_check(backend& dev, const pipeline_case& c) : m_dev(dev), m_case(c) {}
  std::string reference_name() const override { return "bf16 weights and KV cache on the cuda engine"; }
  std::unique_ptr<llm::logits_model> make(bool reference, const llm::embedding_rows& rows, std::int64_t sequences,
                                          std::int64_t context) override {
    llm::engine_options o;
    o.batch = sequences;
    o.max_context = context;
    o.weights = reference ? llm::dtype::bf16 : m_case.language_weights;
    o.kv = reference ? llm::dtype::bf16 : m_case.language_kv;
    return std::make_unique<image_prompt_logits>(
        std::make_unique<llm::cuda_engine>(m_dev, m_case.language, m_case.seed, o), rows);
  }

 private:
  backend& m_dev;
  const pipeline_case& m_case;
};

// The case's device memory at a batch, planned without allocating: both models (what each keeps
// while the other runs, when staged), the image side's buffers (the preprocessing's, and nvJPEG's
// output with decode=gpu; nvJPEG's own working memory is not counted) and the matrix-product
// workspace.
struct case_plan {
  std::uint64_t vision = 0;        // the encoder's weights and activations, the image tokens aside
  std::uint64_t image_tokens = 0;  // the projector's output: kept while the language model runs
  std::uint64_t language = 0;      // weights, KV cache and activations
  std::uint64_t images = 0;        // preprocessing (and GPU decode output) buffers
  std::uint64_t workspace = 0;
  std::uint64_t kept() const { return image_tokens + images + workspace; }
  std::uint64_t resident() const { return vision + language + kept(); }
  std::uint64_t staged() const { return std::max(vision, language) + kept(); }
  std::uint64_t total(bool staged_) const { return staged_ ? staged() : resident(); }
};

// The image side's bytes for this case's batch of images (sizes in batch order).
std::uint64_t image_side_bytes(const pipeline_case& c, const std::vector<std::pair<std::uint32_t, std::uint32_t>>& sizes) {
  std::uint64_t decoded = 0;
  for (const auto& [w, h] : sizes) decoded += 3ull * w * h;
  return gpu_preprocessor::device_bytes(c.preprocess, sizes, !c.gpu_decode) + (c.gpu_decode ? decoded : 0);
}

// `images`: the image side's bytes at the case's own batch; other batches scale it.
case_plan plan_case(backend& dev, const pipeline_case& c, std::int64_t batch, std::uint64_t images) {
  const vit_engine_memory v = gpu_vit::plan(dev, c.vision, cuda_vision::options(c, batch));
  const llm::engine_memory l = llm::cuda_engine::plan(dev, c.language, language_options(c, batch));
  case_plan p;
  p.image_tokens = static_cast<std::uint64_t>(batch * c.images * c.tokens_per_image() * c.language.hidden) * 2;
  p.vision = v.weights + v.activations - p.image_tokens;
  p.language = l.weights + l.kv_cache + l.activations;
  p.images = static_cast<std::uint64_t>(static_cast<double>(images) * static_cast<double>(batch) /
                                        static_cast<double>(c.batch));
  p.workspace = l.workspace;
  return p;
}

// The largest batch whose plan fits `envelope` (0 when not even one request fits); every part
// grows with the batch, so the search is monotone.
std::int64_t largest_batch(backend& dev, const pipeline_case& c, bool staged, std::uint64_t envelope,
                           std::uint64_t images) {
  std::int64_t lo = 0, hi = 65535 / c.images;  // the encoder takes at most 65535 images per call
  pipeline_case k = c;
  k.staged = staged;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (plan_case(dev, k, mid, images).total(staged) <= envelope) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// residency=staged: the weights of each engine in a store, its memory given back between uses.
class cuda_stager final : public model_stager {
 public:
  cuda_stager(gpu_vit& vit, cuda::weight_store& vision_store, llm::cuda_engine& lm, cuda::weight_store& language_store)
      : m_vit(vit), m_vision_store(vision_store), m_lm(lm), m_language_store(language_store) {}

  void load_encoder(stage_recorder::scope& sc) override {
    m_vit.restore();
    note(m_vision_store.load(m_vit.weights_device()), sc);
  }
  void unload_encoder() override { m_vit.offload(); }
  void load_language_model(stage_recorder::scope& sc) override {
    m_lm.restore();
    note(m_language_store.load(m_lm.weights_device()), sc);
  }
  void unload_language_model() override { m_lm.offload(); }
  void wait() override { m_lm.synchronize(); }  // the stream both engines share

  double max_cached_fraction() const { return m_cached; }

 private:
  void note(const cuda::store_load& r, stage_recorder::scope& sc) {
    sc.add_bytes_read(static_cast<double>(r.bytes));  // what came from the store, once (a copy: not twice)
    m_cached = std::max(m_cached, r.cached_fraction);
  }
  gpu_vit& m_vit;
  cuda::weight_store& m_vision_store;
  llm::cuda_engine& m_lm;
  cuda::weight_store& m_language_store;
  double m_cached = -1;
};

std::unique_ptr<cuda::weight_store> store_of(backend& dev, const pipeline_case& c, void* weights, std::uint64_t bytes,
                                             std::string_view model) {
  const auto kind = c.weights_from == "disk" ? cuda::store_kind::disk : cuda::store_kind::pinned;
  try {
    return std::make_unique<cuda::weight_store>(
        dev, kind, weights, bytes, llm::scratch_dir() / fmt::format("staged-{}-{}.weights", model, ::getpid()));
  } catch (const cuda::out_of_memory& e) {
    throw case_skipped(fmt::format("residency=staged: the {} weights do not fit in page-locked host memory ({}): "
                                   "weights_from=disk, or residency=resident",
                                   model, e.what()));
  }
}

}  // namespace

void run_pipeline_cuda(case_state& st) {
  const pipeline_case c = read_pipeline_case(st);
  backend& dev = st.device();
  if (c.staged) {
    if (const std::string why = cuda::evictable_unavailable_reason(dev.device_index()); !why.empty())
      throw case_skipped("residency=staged gives the models' memory back between stages and needs " + why);
  }
  // The plan before anything is allocated (R5), against the envelope (R12). The cuBLASLt
  // workspace is the backend's, allocated already: the free memory the driver reports has it
  // taken, the plan and the measured peak count it.
  const std::uint64_t workspace = cuda::as_cuda(dev).lt_workspace_size();
  const std::uint64_t free_bytes = dev.memory().free_bytes + workspace;
  const std::uint64_t asked = static_cast<std::uint64_t>(c.envelope_gib) << 30;
  const std::uint64_t envelope = asked > 0 ? std::min(asked, free_bytes) : free_bytes;
  if (asked > free_bytes)
    st.set_detail("memory.envelope", fmt::format("envelope {} GiB asked; the device has {} free: planned against that",
                                                 c.envelope_gib, cuda::format_gib(free_bytes)));
  const std::uint64_t image_bytes = image_side_bytes(c, batch_image_sizes(c));
  const case_plan plan = plan_case(dev, c, c.batch, image_bytes);
  st.add_metric("memory/envelope", static_cast<double>(envelope), "B");
  st.add_metric("memory/plan/vision", static_cast<double>(plan.vision + plan.image_tokens), "B");
  st.add_metric("memory/plan/language", static_cast<double>(plan.language), "B");
  st.add_metric("memory/plan/images", static_cast<double>(plan.images), "B");
  st.add_metric("memory/plan/total", static_cast<double>(plan.total(c.staged)), "B");
  st.add_metric("memory/largest_batch/resident",
                static_cast<double>(largest_batch(dev, c, false, envelope, image_bytes)), "requests");
  st.add_metric("memory/largest_batch/staged",
                static_cast<double>(largest_batch(dev, c, true, envelope, image_bytes)), "requests");
  if (plan.total(c.staged) > envelope)
    throw case_skipped(fmt::format(
        "does not fit: {} {} and {} at batch {} need {} ({} vision, {} language, {} images, {} workspace), the "
        "envelope is {}; a smaller batch{}",
        c.staged ? "staged" : "resident", c.vision.name, c.language.name, c.batch,
        cuda::format_gib(plan.total(c.staged)), cuda::format_gib(plan.vision + plan.image_tokens),
        cuda::format_gib(plan.language), cuda::format_gib(plan.images), cuda::format_gib(plan.workspace),
        cuda::format_gib(envelope), c.staged ? "" : ", or residency=staged"));

  memory_tracker& tracker = dev.memory_tracking();
  const std::uint64_t baseline = tracker.current();
  (void)tracker.exchange_peak(baseline);
  // Staged: each model is made, its weights put in its store and its memory given back before the
  // next is made, so that the peak is the staged one from the start.
  cuda_vision vision(dev, c);
  std::unique_ptr<cuda::weight_store> vision_store, language_store;
  if (c.staged) {
    vision_store = store_of(dev, c, vision.engine().weights_device(), vision.engine().weights_bytes(), "vision");
    vision.engine().offload();
  }
  llm::cuda_engine lm(dev, c.language, c.seed, language_options(c, c.batch));
  std::unique_ptr<cuda_stager> stager;
  if (c.staged) {
    language_store = store_of(dev, c, lm.weights_device(), lm.weights_bytes(), "language");
    lm.offload();
    stager = std::make_unique<cuda_stager>(vision.engine(), *vision_store, lm, *language_store);
    st.set_detail("residency.stores", fmt::format("{} weights ({}) and {} weights ({}) in {}", c.vision.name,
                                                  cuda::format_gib(vision_store->bytes()), c.language.name,
                                                  cuda::format_gib(language_store->bytes()),
                                                  c.weights_from == "disk" ? "files on disk under " +
                                                                                 llm::scratch_dir().string()
                                                                           : std::string("page-locked host memory")));
  }
  st.set_field("precision.vision", vision.precision_note());
  const pipeline_batch batch = run_pipeline(st, c, vision, lm, stager.get());
  lm.synchronize();
  if (stager && stager->max_cached_fraction() >= 0) {
    st.add_metric("residency/disk_cached_fraction", stager->max_cached_fraction(), "ratio");
    if (stager->max_cached_fraction() > 0.5)
      st.set_detail("residency.disk", fmt::format("the weight files stayed in memory after the store asked the kernel to "
                                                  "drop them ({:.0f}% cached: a memory file system such as tmpfs?): "
                                                  "these loads did not come from a disk; point TMPDIR at one",
                                                  100 * stager->max_cached_fraction()));
  }
  const auto v = vision.memory();
  const auto e = lm.memory();
  st.add_metric("memory/vision/weights", static_cast<double>(v.weights), "B");
  st.add_metric("memory/vision/activations", static_cast<double>(v.activations + v.workspace), "B");
  st.add_metric("memory/engine/weights", static_cast<double>(e.weights), "B");
  st.add_metric("memory/engine/kv_cache", static_cast<double>(e.kv_cache), "B");
  st.add_metric("memory/engine/activations", static_cast<double>(e.activations), "B");
  // The allocator's high-water mark over the case, the workspace held before it included (as the plan).
  st.add_metric("memory/measured_peak", static_cast<double>(tracker.peak() - baseline + workspace), "B");
  // fp8 weights or KV cache: their quality against bf16 ones, with engines of its own (after the memory).
  if (c.language_weights != llm::dtype::bf16 || c.language_kv != llm::dtype::bf16) {
    cuda_precision_check quality(dev, c);
    record_precision_quality(st, quality, batch, vision, stager.get());
  }
}

}  // namespace itera::mm
