#pragma once
// The multimodal pipeline workload `multimodal` (issue 4): requests of images and a text prompt
// run from files on disk to generated tokens, every stage timed (host and device) with its bytes:
//   read        the image files (loader.hpp)
//   decode      on the CPU, libjpeg-turbo and libpng in a pool sized to the cores
//   preprocess  resize, crop, normalise, patchify (the GPU kernels on cuda: bit-exact with the
//               CPU reference, preprocess_gpu.hpp)
//   vision      the encoder and the projector (vit_gpu.hpp on cuda, vit_cpu.hpp on cpu), their own
//               stages nested inside ("vision/layers/attention", "vision/projector.fc1", ...)
//   context     the prompts with the images' tokens merged in (context.hpp), staged in the engine
//   generation  by the llm engine (engine.hpp) through the llm workload's generate_wave:
//               "generation/prefill" then "generation/decode", a fixed output length (R10), and
//               "generation/d2h" bringing the generated ids back (end-to-end loop)
//   write       the generated ids to a JSON-lines file as the llm workload writes them, "line"
//               the request's 1-based position in the batch (end-to-end loop)
// Residency (R11): `resident` keeps both models on the device; `staged` keeps each model's device
// memory (weights, activations, the language model's KV cache) only while it runs: every pass
// loads the encoder's weights (stage "load_encoder") from page-locked host memory or from a file
// on disk (`weights_from`), encodes, gives the encoder's memory back ("unload_encoder"), then does
// the same for the language model around context and generation ("load_language_model",
// "unload_language_model"). Both models' memory is planned before anything is allocated; a case
// whose plan exceeds the envelope (the device's free memory, or the `envelope` axis in GiB) is
// recorded as "does not fit". Each case reports the largest batch that fits the envelope under
// either residency (R12: what the memory staging saves buys); running the sweep at those batches
// measures it.
// Two loops (R1): compute (the encoder's input already on the device: vision, context and
// generation only) and end_to_end (every stage above from the files). The set is generated
// (`source=synthetic`: photo-like JPEGs of the `resolution` axis, one per image of the batch) or a
// folder of the user's images (`source=DIR`: request i takes images i*n .. i*n+n-1 of the folder's
// listing, wrapping around). A request with an image that cannot be read or decoded is left out of
// its batch and counted; the images' errors are recorded by index (never by name or content, R18).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "itera/core/recorder.hpp"
#include "itera/core/workload.hpp"
#include "workloads/llm/engine.hpp"
#include "workloads/llm/model.hpp"
#include "workloads/llm/quality.hpp"
#include "workloads/multimodal/image_codec.hpp"
#include "workloads/multimodal/context.hpp"
#include "workloads/multimodal/loader.hpp"
#include "workloads/multimodal/preprocess.hpp"
#include "workloads/multimodal/vit_model.hpp"

namespace itera {
class case_state;
}

namespace itera::mm {

inline constexpr int pipeline_workload_version = 1;

struct pipeline_case {
  vit_config vision;            // the projector's llm_hidden is the language model's hidden size
  llm::model_config language;
  std::int64_t resolution = 0;  // side of the generated images
  std::int64_t images = 1;      // per request
  std::int64_t batch = 1;       // requests per batch
  std::int64_t prompt = 1;      // text tokens per request
  std::int64_t output = 1;      // tokens generated per request
  std::uint64_t seed = 1;
  bool end_to_end = false;
  bool gpu_decode = false;      // decode with nvJPEG on the device (JPEG only), else the CPU pool
  std::string source = "synthetic";  // or a folder of images
  llm::dtype language_weights = llm::dtype::bf16;  // bf16, or fp8_e4m3 (cuda)
  llm::dtype language_kv = llm::dtype::bf16;       // the KV cache: bf16 or fp8_e4m3
  bool staged = false;               // residency=staged (else resident)
  std::string weights_from = "pinned";  // staged: "pinned" host memory or "disk"
  std::int64_t envelope_gib = 0;     // the memory the models may plan for; 0: the device's free memory
  preprocess_config preprocess;      // the encoder's: its side and patch, CLIP's normalisation
  // fc1's sums rounded to bf16 before the activation, as PyTorch runs a bf16 Linear and then its
  // activation (quick_gelu, gelu; gelu_tanh runs in cuBLASLt's epilogue from fp32 sums).
  bool fc1_bf16_sums = true;
  std::int64_t tokens_per_image() const { return vision.projector_tokens(); }
  std::int64_t context_length() const { return prompt + images * tokens_per_image(); }
};

// The image processor of the encoder's family, as transformers configures it: CLIP (a class
// token): the shorter side resized to S, the centre S x S, CLIP's mean and std; SigLIP (none): the
// whole image resized to S x S, mean and std 0.5. Patches: floor(S / P)^2 (SigLIP's 384 px with
// 14-px patches: 27 x 27, as its Conv2d).
preprocess_config image_processor_for(const vit_config& vision);
std::string image_processor_name(const preprocess_config& config);

// The case's axes, checked: usage_error naming the axis and the fix (an encoder whose side is not
// a multiple of its patch, a context longer than the language model's, ...).
pipeline_case read_pipeline_case(const case_state& st);

// The image tokens the vision side produced: bf16 [views, T', llm_hidden], on the host or on the
// backend's device.
struct image_tokens {
  const std::uint16_t* values = nullptr;
  bool on_device = false;
};

// What differs between backends on the image side.
class vision_side {
 public:
  virtual ~vision_side() = default;
  // Preprocesses `images` (one view each) into the encoder's input and keeps it until the next call.
  virtual void preprocess(const std::vector<const rgb_image*>& images) = 0;
  // Encodes and projects the kept input of `views` views, its stages nested in `rec`'s open scope.
  virtual image_tokens encode(std::int64_t views, stage_recorder& rec) = 0;
  // Bytes the preprocessing moved to the device for the last call (0 on the cpu backend).
  virtual std::uint64_t bytes_uploaded() const { return 0; }
  // Called once before the timed loop with the views each call will encode (plans, tuning).
  virtual void prepare(std::int64_t /*views*/) {}
  // The GPU decode stage (decode=gpu), for sides that have one: decodes `files` (host bytes) on the
  // device; ok[i] says whether file i decoded, `errors` (by file index) why not. The pixels stay
  // on the device for preprocess_decoded(), until the next decode. The base has none: both skip
  // the case.
  virtual void decode(const read_batch& files, std::vector<char>& ok, std::vector<image_error>& errors);
  // Preprocesses the decoded files `which` (indices into the last decode's files), one view each.
  virtual void preprocess_decoded(const std::vector<std::size_t>& which);
};

// What residency=staged does between stages (the backends that can: cuda). Each load waits until
// the model is back on the device with its weights, and declares the bytes it moved in `sc`.
class model_stager {
 public:
  virtual ~model_stager() = default;
  // Waits for the work queued so far, outside any stage: the load and unload stages then time
  // their own work, not the stages before them still running on the device.
  virtual void wait() = 0;
  virtual void load_encoder(stage_recorder::scope& sc) = 0;
  virtual void unload_encoder() = 0;
  virtual void load_language_model(stage_recorder::scope& sc) = 0;
  virtual void unload_language_model() = 0;
};

// Quality of the language model's weight precision (R6, R10), for cases whose weights are not the
// reference's: after the timed loop, a model of the tested precision and one of the reference run
// the batch's contexts with the image tokens of the last pass, the reference fed the tested
// model's greedy tokens (llm/quality.hpp): "quality/logits_rel_error" and
// "quality/top1_agreement" over min(output, 16) positions per request.
class precision_check {
 public:
  virtual ~precision_check() = default;
  virtual std::string reference_name() const = 0;
  // A fresh model of `sequences` sequences of up to `context` tokens, the tested precision or the
  // reference, whose prefill stages `rows` as the image rows of its prompts.
  virtual std::unique_ptr<llm::logits_model> make(bool reference, const llm::embedding_rows& rows,
                                                  std::int64_t sequences, std::int64_t context) = 0;
};

// The sizes of the batch's images (width, height), from the set's manifest or the files' headers,
// in batch order; an image whose header cannot be read is left out (the run records it). For the
// memory plan, before anything is allocated.
std::vector<std::pair<std::uint32_t, std::uint32_t>> batch_image_sizes(const pipeline_case& c);

// What a case ran on: the good requests' contexts, the views they hold, the output length.
struct pipeline_batch {
  prepared_context ctx;
  std::int64_t views = 0, requests = 0, output = 0;
};

// Runs one case: builds the set and the requests, declares the work, runs one cold pass, then
// times the loop. The cold pass's per-stage host times become "latency/cold/<stage>", beside the
// warm loop's mean host times per repetition, "latency/warm/<stage>" (what a first batch pays on
// the host: kernel loading, plans, first touches; GPU stages' host times are their enqueueing);
// "latency/cold/total" and "latency/warm/total" include waiting for the device.
// With a stager, each pass stages the models (residency=staged); both start unloaded.
pipeline_batch run_pipeline(case_state& st, const pipeline_case& c, vision_side& vision, llm::engine& lm,
                            model_stager* stager = nullptr);

// The quality figures of `check` on the batch's contexts, the image tokens encoded again from the
// vision side's kept input (loaded and unloaded around it when staged); when a model cannot be made
// or run (it does not fit beside the others, say), the reason in "quality.not_measured": the
// timings stand either way. Call it after the memory figures: it makes models of its own.
void record_precision_quality(case_state& st, precision_check& check, const pipeline_batch& batch, vision_side& vision,
                              model_stager* stager);

workload_decl pipeline_declaration();
void run_pipeline_cpu(case_state& st);
void run_pipeline_cuda(case_state& st);  // pipeline_cuda.cpp, cuda builds

}  // namespace itera::mm
