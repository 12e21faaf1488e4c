// The multimodal pipeline's driver, declaration and cpu backend (pipeline.hpp).
#include "workloads/multimodal/pipeline.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <thread>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "itera/core/timer.hpp"
#include "workloads/llm/cpu_engine.hpp"
#include "workloads/llm/prompts.hpp"
#include "workloads/llm/scenarios.hpp"
#include "workloads/llm/weights.hpp"
#include "workloads/multimodal/context.hpp"
#include "workloads/multimodal/image_set.hpp"
#include "workloads/multimodal/loader.hpp"
#include "workloads/multimodal/thread_pool.hpp"
#include "workloads/multimodal/vit_cpu.hpp"

namespace itera::mm {
namespace {

// The generated set of a case: one JPEG per image of the batch, `resolution` square, kept in the
// scratch folder and reused by later cases with the same size, count and seed.
std::filesystem::path synthetic_set(const pipeline_case& c) {
  const auto count = static_cast<std::size_t>(c.batch * c.images);
  const auto dir = llm::scratch_dir() / fmt::format("images-r{}-n{}-s{}", c.resolution, count, c.seed);
  if (std::filesystem::exists(dir / "manifest.json")) return dir;
  std::filesystem::remove_all(dir);  // a set an interrupted run left half written
  image_set_spec spec;
  spec.seed = c.seed;
  spec.sizes = {{static_cast<std::uint32_t>(c.resolution), static_cast<std::uint32_t>(c.resolution)}};
  spec.count = count;
  spec.formats = {image_format::jpeg};
  spec.requests = 1;
  spec.max_images_per_request = 1;
  (void)write_image_set(dir, spec);
  return dir;
}

// The images of one batch, request by request (request i: entries i*n .. i*n+n-1), each entry a
// copy of the set's (its `index` is the set's, for errors).
image_set batch_images(const pipeline_case& c) {
  const image_set set = list_images(c.source == "synthetic" ? synthetic_set(c) : std::filesystem::path(c.source));
  image_set out;
  out.root = set.root;
  out.from_manifest = set.from_manifest;
  const auto total = static_cast<std::size_t>(c.batch * c.images);
  for (std::size_t k = 0; k < total; ++k) out.entries.push_back(set.entries[k % set.entries.size()]);
  return out;
}

// What a pass over the batch's files produced: the decoded images (on the host for the CPU pool,
// on the device for the GPU decoder) and which requests can run.
struct decoded_batch {
  decode_batch images;                      // the CPU pool's (empty with decode=gpu)
  std::vector<char> ok;                     // per file of the batch
  std::size_t good = 0, bad = 0;
  std::vector<std::int64_t> good_requests;  // requests whose every image decoded
  std::vector<image_error> errors;          // by the set's index
};

decoded_batch read_and_decode(const pipeline_case& c, const image_set& batch, thread_pool& pool, vision_side& vision,
                              stage_recorder& rec) {
  decoded_batch out;
  read_batch files;
  {
    auto sc = rec.enter("read");
    files = read_images(batch, &pool);
    sc.add_bytes_read(static_cast<double>(files.total_bytes));
  }
  std::vector<image_error> errors;
  if (c.gpu_decode) {
    auto sc = rec.enter("decode");
    vision.decode(files, out.ok, errors);
    sc.add_bytes_read(static_cast<double>(files.total_bytes));
  } else {
    auto sc = rec.enter("decode");
    out.images = decode_images(files, pool);
    sc.add_bytes_read(static_cast<double>(out.images.input_bytes));
    sc.add_bytes_written(static_cast<double>(out.images.output_bytes));
    out.ok = out.images.ok;
    errors = out.images.errors;
  }
  for (const auto& e : errors) out.errors.push_back({batch.entries[e.index].index, e.stage, e.reason});
  for (const char k : out.ok) (k ? out.good : out.bad) += 1;
  for (std::int64_t r = 0; r < c.batch; ++r) {
    bool ok = true;
    for (std::int64_t j = 0; j < c.images; ++j) ok = ok && out.ok[static_cast<std::size_t>(r * c.images + j)];
    if (ok) out.good_requests.push_back(r);
  }
  return out;
}

// Preprocesses the images of the good requests, in request order: from the host (CPU decode) or
// from the device (GPU decode).
void preprocess_good(const pipeline_case& c, const decoded_batch& d, vision_side& vision) {
  if (c.gpu_decode) {
    std::vector<std::size_t> files;
    for (const auto r : d.good_requests)
      for (std::int64_t j = 0; j < c.images; ++j) files.push_back(static_cast<std::size_t>(r * c.images + j));
    vision.preprocess_decoded(files);
    return;
  }
  std::vector<const rgb_image*> images;
  for (const auto r : d.good_requests)
    for (std::int64_t j = 0; j < c.images; ++j)
      images.push_back(&d.images.images[static_cast<std::size_t>(r * c.images + j)]);
  vision.preprocess(images);
}

std::string error_text(const std::vector<image_error>& errors) {
  std::string s;
  for (std::size_t i = 0; i < errors.size() && i < 8; ++i)
    s += fmt::format("{}image {} ({}): {}", i ? "; " : "", errors[i].index, errors[i].stage, errors[i].reason);
  if (errors.size() > 8) s += fmt::format("; and {} more", errors.size() - 8);
  return s;
}

// residency=staged: a load or unload as a stage of its own in `rec`, begun once the work queued
// before it has finished (model_stager::wait), so that it times only itself. Nothing when resident.
template <class Step>
void staging_stage(model_stager* stager, stage_recorder& rec, const char* name, Step&& step) {
  if (!stager) return;
  stager->wait();
  auto sc = rec.enter(name);
  step(sc);
}

// `work` with the encoder on the device: loaded and given back around it, untimed, when staged.
template <class Work>
void with_encoder(model_stager* stager, Work&& work) {
  if (!stager) return work();
  stage_recorder untimed;
  {
    auto sc = untimed.enter("load_encoder");
    stager->load_encoder(sc);
  }
  work();
  stager->unload_encoder();
}

// The contexts and the images' tokens staged in the engine for the next prefill.
void stage_context(llm::engine& lm, stage_recorder& rec, const prepared_context& ctx, const image_tokens& tokens) {
  auto sc = rec.enter("context");
  lm.stage_prompts(ctx.ids);
  lm.stage_embeddings({ctx.image_rows, tokens.values, tokens.on_device});
  sc.add_bytes_written(static_cast<double>(ctx.ids.size() * sizeof(std::int32_t) +
                                           ctx.image_rows.size() * sizeof(std::int64_t)));
}

// The requests as the llm workload's generation takes them: request i's context ids, `output`
// tokens, and its 1-based position in the batch as its line (what the generations file names).
std::vector<llm::prompt_request> wave_of(const prepared_context& ctx, const std::vector<std::int64_t>& requests,
                                         std::int64_t output) {
  std::vector<llm::prompt_request> wave;
  for (std::int64_t i = 0; i < ctx.count; ++i) {
    const auto* ids = ctx.ids.data() + i * ctx.length();
    wave.push_back({requests[static_cast<std::size_t>(i)] + 1, {ids, ids + ctx.length()}, output});
  }
  return wave;
}

}  // namespace

std::vector<std::pair<std::uint32_t, std::uint32_t>> batch_image_sizes(const pipeline_case& c) {
  const image_set batch = batch_images(c);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> sizes;
  image_decoder decoder;
  std::vector<std::uint8_t> bytes;
  // The headers sit in a file's first bytes (a PNG's in 33, a JPEG's up to its first scan, after
  // its metadata segments): the first 64 KiB are read, and the whole file only where the header
  // does not end there (an EXIF block of tens of kilobytes before the frame header).
  constexpr std::streamsize prefix = 64 * 1024;
  for (const auto& e : batch.entries) {
    if (e.width > 0 && e.height > 0) {
      sizes.emplace_back(e.width, e.height);
      continue;
    }
    std::ifstream in(e.path, std::ios::binary);
    bytes.resize(static_cast<std::size_t>(prefix));
    in.read(reinterpret_cast<char*>(bytes.data()), prefix);
    const std::streamsize got = in.gcount();
    bytes.resize(static_cast<std::size_t>(got));
    try {
      const image_header h = decoder.probe(bytes, image_limits{});
      sizes.emplace_back(h.width, h.height);
      continue;
    } catch (const decode_failure&) {
      if (got < prefix) continue;  // the whole file was read: left out, the run reports the image by index
    }
    bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    try {
      const image_header h = decoder.probe(bytes, image_limits{});
      sizes.emplace_back(h.width, h.height);
    } catch (const decode_failure&) {
      // left out: the run reports the image by index
    }
  }
  return sizes;
}

preprocess_config image_processor_for(const vit_config& v) {
  preprocess_config p;
  p.image_size = static_cast<std::uint32_t>(v.image);
  p.patch_size = static_cast<std::uint32_t>(v.patch);
  if (!v.class_token) {  // SigLIP: resized to S x S whatever the aspect, [-1, 1]
    p.mode = resize_mode::tiles;
    p.min_tiles = p.max_tiles = 1;
    p.thumbnail = false;
    p.mean = siglip_mean;
    p.std = siglip_std;
  }
  return p;
}

std::string image_processor_name(const preprocess_config& p) {
  return p.mode == resize_mode::crop
             ? fmt::format("clip: bicubic resize of the shorter side to {0}, centre crop {0}x{0}, CLIP mean and std",
                           p.image_size)
             : fmt::format("siglip: bicubic resize to {0}x{0}, mean 0.5 and std 0.5", p.image_size);
}

void vision_side::decode(const read_batch&, std::vector<char>&, std::vector<image_error>&) {
  throw case_skipped("decode=gpu: this backend has no GPU decoder");
}

void vision_side::preprocess_decoded(const std::vector<std::size_t>&) {
  throw case_skipped("decode=gpu: this backend has no GPU decoder");
}

pipeline_case read_pipeline_case(const case_state& st) {
  pipeline_case c;
  c.language = llm::preset(st.get_string("model"));
  c.vision = vit_preset(st.get_string("encoder"));
  c.vision.llm_hidden = c.language.hidden;
  validate(c.vision);
  c.fc1_bf16_sums = c.vision.activation != vit_activation::gelu_tanh;
  c.resolution = st.get_int("resolution");
  c.images = st.get_int("images");
  c.batch = st.get_int("batch");
  c.prompt = st.get_int("prompt");
  c.output = st.get_int("output");
  c.seed = static_cast<std::uint64_t>(st.get_int("seed"));
  c.end_to_end = st.get_string("loop") == "end_to_end";
  c.gpu_decode = st.get_string("decode") == "gpu";
  c.source = st.get_string("source");
  c.language_weights = llm::parse_dtype(st.get_string("weights"));
  c.language_kv = llm::parse_dtype(st.get_string("kv"));
  c.staged = st.get_string("residency") == "staged";
  c.weights_from = st.get_string("weights_from");
  c.envelope_gib = st.get_int("envelope");
  c.preprocess = image_processor_for(c.vision);
  validate(c.preprocess);
  if (c.context_length() + c.output > c.language.max_position)
    throw usage_error(fmt::format("{} text tokens + {} images x {} image tokens + {} output tokens = {}, more than the "
                                  "{} tokens {} holds: fewer images per request, or a shorter prompt or output",
                                  c.prompt, c.images, c.tokens_per_image(), c.output, c.context_length() + c.output,
                                  c.language.max_position, c.language.name));
  if (c.source != "synthetic" && !std::filesystem::is_directory(c.source))
    throw usage_error(fmt::format("source '{}' is not a folder: give 'synthetic' or a folder of images", c.source));
  return c;
}

pipeline_batch run_pipeline(case_state& st, const pipeline_case& c, vision_side& vision, llm::engine& lm,
                            model_stager* stager) {
  st.set_field("model", c.language.name);
  st.set_field("encoder", c.vision.name);
  st.set_field("precision.weights", std::string(llm::dtype_name(c.language_weights)));
  st.set_field("precision.kv", std::string(llm::dtype_name(c.language_kv)));
  st.set_field("precision.compute", lm.precision_note());
  st.set_field("loop", c.end_to_end ? "end_to_end" : "compute");
  st.set_field("precision.fc1_sums", c.fc1_bf16_sums ? "bf16" : "fp32");
  st.set_field("preprocess", image_processor_name(c.preprocess));
  // The tokens a sequence holds (text, image tokens, output), as the llm workload names it: what
  // `itera fit` reads as the context of a point.
  st.set_field("context", std::to_string(c.context_length() + c.output));

  const image_set batch = batch_images(c);
  thread_pool pool(std::max<std::size_t>(1, std::thread::hardware_concurrency()));
  // One pass outside the timing: which requests can run (their images read and decode), the
  // compute loop's input, and the errors, recorded once by the set's index.
  stage_recorder untimed;
  decoded_batch first = read_and_decode(c, batch, pool, vision, untimed);
  const auto requests = static_cast<std::int64_t>(first.good_requests.size());
  st.add_metric("work/images_good", static_cast<double>(first.good), "images");
  st.add_metric("work/images_bad", static_cast<double>(first.bad), "images");
  st.add_metric("work/requests", static_cast<double>(requests), "requests");
  if (!first.errors.empty()) st.set_detail("images.errors", error_text(first.errors));
  if (requests == 0)
    throw input_error(fmt::format("no request of the batch has all its images readable and decodable: {}",
                                  error_text(first.errors)));
  const std::int64_t views = requests * c.images;
  const prepared_context ctx = prepare_context(
      {.prompt_tokens = c.prompt, .images = c.images, .tokens_per_image = c.tokens_per_image(), .prefix = 5}, requests,
      c.language.vocab, c.seed, lm.max_prompt());

  // Work of one repetition: the encoder and projector over every view, the prefill of the merged
  // contexts and the decode steps (memory-side bytes as the llm workload counts them).
  const auto vwork = sum_work(vit_stages(c.vision, dtype::bf16, dtype::bf16), views);
  const std::vector<std::int64_t> lens(static_cast<std::size_t>(requests), ctx.length());
  auto total = llm::prefill_work(c.language, c.language_weights, c.language_kv, lens);
  for (std::int64_t s = 1; s < c.output; ++s) {
    const std::vector<std::int64_t> held(static_cast<std::size_t>(requests), ctx.length() + s - 1);
    const auto d = llm::decode_step_work(c.language, c.language_weights, c.language_kv, held);
    total.flops += d.flops;
    total.weight_bytes_read += d.weight_bytes_read;
    total.kv_bytes_read += d.kv_bytes_read;
    total.kv_bytes_written += d.kv_bytes_written;
  }
  st.set_work(vwork.flops() + total.flops, vwork.bytes() + total.bytes_read(), total.kv_bytes_written);
  st.add_metric("work/vision_flops", vwork.flops(), "FLOP");
  st.add_metric("work/context_tokens", static_cast<double>(ctx.length()), "tokens");
  st.add_metric("work/image_tokens", static_cast<double>(views * c.tokens_per_image()), "tokens");

  const auto generations_path = llm::scratch_dir() / "multimodal_generations.jsonl";
  const std::vector<llm::prompt_request> wave = wave_of(ctx, first.good_requests, c.output);
  std::vector<std::vector<std::int32_t>> ids(wave.size());
  // The encoder and projector over the views, each model loaded around its use when staged.
  const auto encode = [&](stage_recorder& rec) {
    staging_stage(stager, rec, "load_encoder", [&](stage_recorder::scope& sc) { stager->load_encoder(sc); });
    image_tokens tokens;
    {
      auto sc = rec.enter("vision");
      tokens = vision.encode(views, rec);
    }
    staging_stage(stager, rec, "unload_encoder", [&](stage_recorder::scope&) { stager->unload_encoder(); });
    return tokens;
  };
  // The images' tokens into the language model: context, then the llm workload's generation (its
  // prefill, decode and, with ids, d2h stages nested in "generation").
  const auto generate = [&](stage_recorder& rec, const image_tokens& tokens, bool to_host) {
    staging_stage(stager, rec, "load_language_model",
                  [&](stage_recorder::scope& sc) { stager->load_language_model(sc); });
    stage_context(lm, rec, ctx, tokens);
    {
      auto sc = rec.enter("generation");
      llm::generate_wave(lm, rec, wave, true, to_host ? &ids : nullptr);
    }
    staging_stage(stager, rec, "unload_language_model",
                  [&](stage_recorder::scope&) { stager->unload_language_model(); });
  };
  // One repetition of the loop, its stages in `rec`.
  const auto pass = [&](stage_recorder& rec) {
    if (!c.end_to_end) {
      generate(rec, encode(rec), false);
      return;
    }
    const decoded_batch d = read_and_decode(c, batch, pool, vision, rec);
    if (d.good_requests != first.good_requests)
      throw input_error("the images changed during the run: a request's images decoded in one pass and not in another");
    {
      auto sc = rec.enter("preprocess");
      preprocess_good(c, d, vision);
      sc.add_bytes_written(static_cast<double>(vision.bytes_uploaded()));
    }
    generate(rec, encode(rec), true);
    auto sc = rec.enter("write");
    const auto text = llm::format_generations(wave, ids);
    llm::write_text_file(generations_path, text);
    sc.add_bytes_written(static_cast<double>(text.size()));
  };

  // Compute-only: the encoder's input is on the device before timing.
  if (!c.end_to_end) preprocess_good(c, first, vision);
  if (c.end_to_end) st.set_detail("files.generations", generations_path.string());
  // Cold: the first request batch of a fresh process's models, host latency per stage (the lazy
  // work a first call does: kernel loading, plans, first touches). Then the warm loop.
  std::vector<std::pair<std::string, double>> cold;
  {
    stage_recorder cold_rec;
    const auto t0 = host_now_ns();
    pass(cold_rec);
    lm.synchronize();
    const double total_ns = static_cast<double>(host_now_ns() - t0);
    for (const auto& s : cold_rec.finish())
      if (s.depth == 0) cold.emplace_back(s.path, s.host_ns);
    cold.emplace_back("total", total_ns);
  }
  with_encoder(stager, [&] { vision.prepare(views); });
  auto& rec = st.stages();
  st.exec([&] { pass(rec); });

  st.on_finish([requests, views, c, cold](case_record& r) {
    if (r.device_ns.empty()) return;
    const double reps = static_cast<double>(r.device_ns.size());
    for (const auto& [stage, ns] : cold) {
      r.metrics.push_back({"latency/cold/" + stage, ns * 1e-9, "s"});
      if (stage == "total") {
        double host = 0;
        for (const auto& h : r.host_ns) host += h;
        r.metrics.push_back({"latency/warm/total", host / reps * 1e-9, "s"});
      } else if (const stage_record* s = r.find_stage(stage)) {
        r.metrics.push_back({"latency/warm/" + stage, s->host_ns / reps * 1e-9, "s"});
      }
    }
    std::vector<double> t = r.device_ns;
    std::sort(t.begin(), t.end());
    const double median_s = t[t.size() / 2] * 1e-9;
    r.metrics.push_back({"throughput/images_per_s", static_cast<double>(views) / median_s, "images/s"});
    r.metrics.push_back({"throughput/requests_per_s", static_cast<double>(requests) / median_s, "requests/s"});
    r.metrics.push_back(
        {"throughput/output_tokens_per_s", static_cast<double>(requests * c.output) / median_s, "tokens/s"});
    // Time to first token of a batch: the stages before the first decode step, per repetition, each
    // its device time where it ran device work, else its host time (read and decode run on the
    // host; the staged loads and unloads wait for the host's reads and the copies: host time).
    const double samples = static_cast<double>(r.device_ns.size());
    double first_token_ns = 0;
    for (const char* s : {"read", "decode", "preprocess", "vision", "context", "generation/prefill"})
      if (const stage_record* x = r.find_stage(s)) first_token_ns += x->device_ns > 0 ? x->device_ns : x->host_ns;
    for (const char* s : {"load_encoder", "unload_encoder", "load_language_model"})
      if (const stage_record* x = r.find_stage(s)) first_token_ns += x->host_ns;
    r.metrics.push_back({"latency/ttft", first_token_ns / samples * 1e-9, "s"});
  });
  return {ctx, views, requests, c.output};
}

void record_precision_quality(case_state& st, precision_check& check, const pipeline_batch& batch, vision_side& vision,
                              model_stager* stager) {
  const prepared_context& ctx = batch.ctx;
  const std::int64_t requests = batch.requests;
  const std::int64_t positions = std::min<std::int64_t>(batch.output, 16);
  // The image tokens of the batch again (the compute loop's input, or the last pass's), where the
  // vision side keeps them: the engines read them from there.
  stage_recorder untimed;
  image_tokens tokens;
  with_encoder(stager, [&] { tokens = vision.encode(batch.views, untimed); });
  const llm::embedding_rows rows{ctx.image_rows, tokens.values, tokens.on_device};
  llm::quality_figures f;
  try {
    llm::quality_trace tested;
    {
      auto model = check.make(false, rows, requests, ctx.length() + positions);
      tested = llm::trace_logits(*model, ctx.ids, ctx.length(), positions);
    }
    auto model = check.make(true, rows, requests, ctx.length() + positions);
    f = llm::compare_traces(tested, llm::trace_logits(*model, ctx.ids, ctx.length(), positions, &tested));
  } catch (const std::exception& e) {
    st.set_detail("quality.not_measured", fmt::format("against {}: {}", check.reference_name(), e.what()));
    return;
  }
  st.add_metric("quality/logits_rel_error", f.logits_rel_error, "ratio");
  st.add_metric("quality/top1_agreement", f.top1_agreement, "ratio");
  st.set_detail("quality.reference", check.reference_name());
  st.set_detail("quality.positions",
                fmt::format("{} ({} requests x {} positions after their {}-token contexts with the image tokens, the "
                            "reference fed the tested model's greedy tokens)",
                            f.positions, requests, positions, ctx.length()));
}


workload_decl pipeline_declaration() {
  workload_decl w;
  w.name = "multimodal";
  w.version = pipeline_workload_version;
  w.summary = "images from disk -> decode -> preprocess -> vision encoder + projector -> context -> generation";
  std::vector<std::string> encoders;
  for (const auto& n : vit_preset_names()) encoders.push_back(n);
  w.axes = {
      {"encoder", axis_kind::string, "clip-vit-large-patch14-336", "vision encoder preset", encoders, 0, 0},
      {"model", axis_kind::string, "llama-3.1-8b", "language model preset (the projector maps to its width)",
       llm::preset_names(), 0, 0},
      {"loop", axis_kind::string, "compute",
       "compute: the encoder's input on the device before timing; end_to_end: from the image files to the "
       "generations file",
       {"compute", "end_to_end"}, 0, 0},
      {"decode", axis_kind::string, "cpu",
       "cpu: libjpeg-turbo and libpng on a pool of the host's cores; gpu: nvJPEG on the device (JPEG only; the "
       "pixels stay there for the preprocessing)",
       {"cpu", "gpu"}, 0, 0},
      {"resolution", axis_kind::integer, "768", "side of the generated images (source=synthetic)", {}, 16, 8192},
      {"images", axis_kind::integer, "1", "images per request", {}, 1, 64},
      {"batch", axis_kind::integer, "1,8", "requests per batch", {}, 1, 1024},
      {"prompt", axis_kind::integer, "64", "text tokens per request", {}, 1, 1 << 20},
      {"output", axis_kind::integer, "32", "tokens generated per request (fixed: R10)", {}, 1, 1 << 20},
      {"source", axis_kind::string, "synthetic", "'synthetic' (generated JPEGs) or a folder of images", {}, 0, 0},
      {"weights", axis_kind::string, "bf16",
       "the language model's weights: bf16, or fp8_e4m3 (cuda; its quality against bf16 weights reported)",
       {"bf16", "fp8_e4m3"}, 0, 0},
      {"kv", axis_kind::string, "bf16",
       "the language model's KV cache: bf16, or fp8_e4m3 (one scale of 1, saturating; on cuda its quality against "
       "a bf16 cache reported)",
       {"bf16", "fp8_e4m3"}, 0, 0},
      {"residency", axis_kind::string, "resident",
       "resident: both models stay on the device; staged: each model's memory is taken, its weights loaded, and "
       "given back around its stage in every pass (cuda)",
       {"resident", "staged"}, 0, 0},
      {"weights_from", axis_kind::string, "pinned",
       "residency=staged: where the weights wait, page-locked host memory (pinned) or a file on disk (disk)",
       {"pinned", "disk"}, 0, 0},
      {"envelope", axis_kind::integer, "0",
       "GiB the models may plan for (a smaller card's memory, e.g. 22 for an L4's usable share); 0: the device's "
       "free memory",
       {}, 0, 1 << 20},
      {"seed", axis_kind::integer, "1", "images, prompts and weights", {}, 0, std::int64_t{1} << 62},
  };
  w.suite = [](const backend& dev) -> std::vector<axis_overrides> {
    if (dev.name() == "cpu")
      return {{{"encoder", "tiny"}, {"model", "tiny"}, {"resolution", "64"}, {"images", "1,2"}, {"batch", "2"},
               {"prompt", "8"}, {"output", "4"}, {"loop", "compute,end_to_end"}}};
    return {{{"batch", "1,8"}, {"loop", "compute,end_to_end"}},
            {{"images", "1,2,4"}, {"batch", "4"}, {"loop", "end_to_end"}},
            {{"resolution", "224,768,2048"}, {"batch", "8"}, {"loop", "end_to_end"}},
            {{"batch", "8"}, {"loop", "end_to_end"}, {"residency", "staged"}}};
  };
  return w;
}

namespace {

// The cpu backend's vision side: the reference encoder (bf16 rounding points) on the CPU
// preprocessing reference.
class cpu_vision final : public vision_side {
 public:
  cpu_vision(const pipeline_case& c)
      : m_case(c), m_weights(random_vit_weights(c.vision, dtype::bf16, c.seed)), m_reference(m_weights, dtype::bf16) {
    m_reference.set_fc1_bf16_sums(c.fc1_bf16_sums);
  }

  void preprocess(const std::vector<const rgb_image*>& images) override {
    m_pixels = {};
    for (const rgb_image* im : images) {
      pixel_tensor p = mm::preprocess(*im, m_case.preprocess);
      if (m_pixels.views == 0) {
        m_pixels = std::move(p);
      } else {
        m_pixels.values.insert(m_pixels.values.end(), p.values.begin(), p.values.end());
        m_pixels.views += p.views;
      }
    }
  }

  image_tokens encode(std::int64_t views, stage_recorder& rec) override {
    if (views != static_cast<std::int64_t>(m_pixels.views))
      throw std::logic_error(fmt::format("cpu vision: {} views asked, {} preprocessed", views, m_pixels.views));
    token_tensor features, tokens;
    {
      auto sc = rec.enter("encoder");
      features = m_reference.encode(m_pixels);
    }
    {
      auto sc = rec.enter("projector");
      tokens = m_reference.project(features);
    }
    m_tokens = to_bf16(tokens.values);
    return {m_tokens.data(), false};
  }

 private:
  const pipeline_case& m_case;
  vit_weights m_weights;
  vit_reference m_reference;
  pixel_tensor m_pixels;
  std::vector<std::uint16_t> m_tokens;
};

}  // namespace

void run_pipeline_cpu(case_state& st) {
  const pipeline_case c = read_pipeline_case(st);
  // The cpu side holds both models' weights widened to fp32 (the encoder's q, k and v twice: the
  // reference fuses them): refuse before allocating what the host does not have.
  const double needs = 4.0 * (static_cast<double>(llm::count_params(c.language).total()) +
                              1.5 * static_cast<double>(count_params(c.vision).total()));
  const auto free = st.device().memory().free_bytes;
  if (free > 0 && needs > static_cast<double>(free))
    throw case_skipped(fmt::format("does not fit: the cpu backend holds {} and {} in fp32, about {:.1f} GiB, and "
                                   "{:.1f} GiB of host memory is available; run it on cuda, or choose encoder=tiny "
                                   "model=tiny",
                                   c.vision.name, c.language.name, needs / 1073741824.0,
                                   static_cast<double>(free) / 1073741824.0));
  if (c.gpu_decode) throw case_skipped("decode=gpu runs nvJPEG on a GPU: use the cuda backend, or decode=cpu");
  if (c.language_weights != dtype::bf16)
    throw case_skipped(fmt::format("weights={}: the pipeline's cpu backend runs bf16 weights; use the cuda backend",
                                   llm::dtype_name(c.language_weights)));
  if (c.staged)
    throw case_skipped("residency=staged moves the models between the device's memory and the host's; the cpu backend "
                       "has one memory: use the cuda backend, or residency=resident");
  cpu_vision vision(c);
  llm::cpu_engine_options o;
  o.slots = c.batch;
  o.max_context = c.context_length() + c.output;
  o.max_prompt = c.context_length();
  o.kv = c.language_kv;
  llm::cpu_engine lm(llm::random_weights(c.language, llm::dtype::bf16, c.seed), o);
  run_pipeline(st, c, vision, lm);
}

}  // namespace itera::mm
