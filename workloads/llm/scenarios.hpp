#pragma once
// The llm workload's cases: what an axis combination asks for (llm_case), and the scenarios that
// run it on any engine (engine.hpp) through the runner's case_state. docs/llm.md defines every
// figure they record; in short:
//
//   offline        one generation of `batch` sequences per repetition (prefill, then output - 1
//                  decode steps), timed on the device. Stages "prefill" and "decode" give time to
//                  first token (TTFT, the prefill) and time per output token (TPOT, a decode
//                  step); prefill and decode tokens/s; bytes per decode step over TPOT against the
//                  copy ceiling, prefill FLOP/s against the GEMM ceiling.
//   server         requests arrive as a Poisson process at `rate`; between decode steps, arrived
//                  requests join free slots (continuous batching, up to `batch` in flight); every
//                  token is copied to the host as it is made (a client sees it then). Latency runs
//                  from each request's scheduled arrival (load.hpp: TTFT, TPOT, ITL, end-to-end,
//                  goodput against the targets). Samples: per-request end-to-end latency.
//   single_stream  one request at a time, the next issued when the last finishes. Samples: the
//                  end-to-end latency of each.
//
// Loops (R1): `compute` keeps prompt ids on the device before timing and nothing crosses to the
// host inside a repetition; `end_to_end` starts each repetition from the prompts file on disk
// (read, parse, ids to the device, generation with every generated id copied back, the
// generations written to a file), each in its own stage, so the gap between the loops is read
// per stage.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "itera/core/recorder.hpp"
#include "workloads/llm/engine.hpp"
#include "workloads/llm/load.hpp"
#include "workloads/llm/memory_plan.hpp"
#include "workloads/llm/model.hpp"
#include "workloads/llm/prompts.hpp"
#include "workloads/llm/quality.hpp"

namespace itera {
class case_state;
}

namespace itera::llm {

inline constexpr int workload_version = 1;

enum class scenario { offline, server, single_stream };
enum class loop { compute, end_to_end };

struct llm_case {
  model_config config;
  std::string checkpoint = "random";  // "random" or a Hugging Face checkpoint folder
  dtype weights = dtype::bf16, kv = dtype::bf16;
  dtype compute = dtype::bf16;  // the 16-bit type of activations on the cuda engine (the cpu engine's are fp32)
  scenario kind = scenario::offline;
  loop way = loop::compute;
  std::int64_t batch = 1;    // offline: sequences per generation; server: the most in flight
  std::int64_t prompt = 0;   // synthetic prompts' length
  std::int64_t output = 0;   // tokens generated per request (the first comes from the prefill)
  std::int64_t context = 0;  // tokens a slot holds: prompt + output unless the axis sets it
  std::string prompts = "synthetic";  // or a JSON-lines file (prompts.hpp)
  double rate = 0;           // server: requests per second
  std::int64_t requests = 0;  // server and single stream: requests per run
  latency_targets targets;
  std::uint64_t seed = 1;
};

// The case's axes, checked: usage_error naming the axis, the value and what would be accepted
// (rate or batch not positive, a shape that breaks a model rule, a compute loop given a file).
llm_case read_case(const case_state& st);

// How an engine holds its numbers: as the case's precisions (the cuda engine) or everything in fp32
// (the cpu engine, whatever the weights' storage precision).
enum class held_as { case_precision, fp32 };

// The memory the case needs on its engine, for the plan (R5).
memory_request memory_needs(const llm_case& c, std::uint64_t workspace_bytes, held_as held, bool fp8_products = false);

// Checks the plan against `free_bytes` and records it in the case (fields are not recipe: details
// memory.plan.*); throws case_skipped "does not fit: needs X GiB, Y GiB free (...)" when it does
// not fit. Also records the largest batch and context that fit beside this case's.
memory_plan check_memory(case_state& st, const llm_case& c, std::uint64_t free_bytes, std::uint64_t workspace_bytes,
                         held_as held, bool fp8_products = false);

// Quality of one of the case's precisions against `reference_name` (quality.hpp): the tested
// model is the case as run, the reference the same with that precision raised. `what` names the
// figures: the weights, quality/logits_rel_error and quality/top1_agreement with the details
// quality.reference, quality.positions; the KV cache, quality/kv_cache/... and quality.kv_cache.*;
// the compute type, quality/compute/... and quality.compute.* (a case may have all three). min(batch, 4) synthetic prompts of the
// case's length, min(output, 16) positions. Each model is built by its function when needed and
// released before the next is built (the two need not fit together). Figures are kept for the
// process's later cases of the same model, precisions, reference and prompt length. When a model
// cannot be built or run, the figures are left out and the detail quality.not_measured (or
// quality.kv_cache.not_measured) says why: the case's timings stand.
enum class quality_of { weights, kv_cache, compute };
using logits_model_factory = std::function<std::unique_ptr<logits_model>(std::int64_t sequences, std::int64_t context)>;
void record_quality(case_state& st, const llm_case& c, const logits_model_factory& test,
                    const logits_model_factory& reference, const std::string& reference_name,
                    quality_of what = quality_of::weights);

// Runs the case on `eng` (built for it: slots = batch, max_context = context). Sets the recipe
// fields, times the scenario and adds its figures.
void run_case(case_state& st, engine& eng, const llm_case& c);

// One wave of requests in slots [0, n): prefill (stage "prefill": one batched prefill of the ids
// already staged when `staged`, every prompt of one length; else each prompt staged and prefilled
// in turn), then decode steps until each request has its output (stage "decode"), slots released.
// With `out`, every id goes to the host as it is made (stage "d2h" collects them) and out[i]
// receives request i's generated ids.
void generate_wave(engine& eng, stage_recorder& rec, std::span<const prompt_request> wave, bool staged,
                   std::vector<std::vector<std::int32_t>>* out);

// A folder of its own under the system's temporary directory for the case's files (the synthetic
// prompts file, the generations); created on first use.
std::filesystem::path scratch_dir();

}  // namespace itera::llm
