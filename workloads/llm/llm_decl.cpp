#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "workloads/llm/checkpoint.hpp"
#include "workloads/llm/cpu_engine.hpp"
#include "workloads/llm/llm.hpp"
#include "workloads/llm/scenarios.hpp"

namespace itera::llm {
namespace {

std::string value_of(const axis_values& v, std::string_view name) {
  for (const auto& [k, x] : v)
    if (k == name) return x;
  return {};
}

}  // namespace

workload_decl declaration() {
  workload_decl w;
  w.name = "llm";
  w.version = workload_version;
  w.summary = "Llama-family decoder: prefill and decode (offline), Poisson server, single stream; both loops";
  std::vector<std::string> models = preset_names();
  w.axes = {
      {"model", axis_kind::string, "llama-3.1-8b", "shape preset", models, 0, 0},
      {"shape", axis_kind::string, "preset",
       "shape fields over the preset: 'layers=8;hidden=2048' (layers, hidden, heads, kv_heads, head_dim, "
       "intermediate, vocab, max_position)", {}, 0, 0},
      {"checkpoint", axis_kind::string, "random",
       "'random' (seeded weights at a realistic scale) or a Hugging Face folder (config.json + *.safetensors)", {}, 0, 0},
      {"compute", axis_kind::string, "bf16",
       "16-bit type of the activations between kernels and of the tensor-core inputs (accumulation and the residual "
       "stream stay fp32); cuda: 16-bit weights of the other type are converted to it once at load, and an fp16 case "
       "reports its quality against bf16 compute; the cpu engine computes in fp32 whatever this says",
       {"bf16", "fp16"}, 0, 0},
      {"weights", axis_kind::string, "bf16",
       "weight storage; fp8_e4m3: layer projections with one scale per output channel (the LM head too with "
       "lm_head=fp8_e4m3), the rest bf16 values (held in the compute type on cuda)",
       {"bf16", "fp16", "fp8_e4m3"}, 0, 0},
      {"lm_head", axis_kind::string, "16bit",
       "LM head storage with weights=fp8_e4m3; 16bit: bf16 as fp8 checkpoints ship it; fp8_e4m3: quantised as the "
       "layer projections are (one scale per vocabulary row; not with a tied embedding table); with 16-bit weights "
       "the LM head is theirs",
       {"16bit", "fp8_e4m3"}, 0, 0},
      {"kv", axis_kind::string, "bf16",
       "KV cache storage; bf16 or fp16: the compute type's (the other is rejected); fp8_e4m3: K and V rounded to e4m3 "
       "at the cache store (one scale per tensor, fixed at 1, saturating), a prefill attending over its own 16-bit K "
       "and V; quality reported against a 16-bit cache",
       {"bf16", "fp16", "fp8_e4m3"}, 0, 0},
      {"scenario", axis_kind::string, "offline", "offline batch, Poisson server, or single stream",
       {"offline", "server", "single_stream"}, 0, 0},
      {"loop", axis_kind::string, "compute",
       "compute: ids on the device before timing; end_to_end: from the prompts file to the generations file",
       {"compute", "end_to_end"}, 0, 0},
      {"batch", axis_kind::integer, "1", "offline: sequences per generation; server: most in flight", {}, 1, 4096},
      {"prompt", axis_kind::integer, "512", "tokens per synthetic prompt", {}, 1, std::int64_t{1} << 20},
      {"output", axis_kind::integer, "128", "tokens generated per request", {}, 1, std::int64_t{1} << 20},
      {"context", axis_kind::integer, "0", "tokens a sequence may hold; 0: prompt + output (or the file's longest)",
       {}, 0, std::int64_t{1} << 22},
      {"prompts", axis_kind::string, "synthetic",
       "'synthetic' or a JSON-lines file of {\"tokens\": [...]} or {\"prompt_len\": N} lines", {}, 0, 0},
      {"rate", axis_kind::string, "4", "server: requests per second (Poisson arrivals)", {}, 0, 0},
      {"requests", axis_kind::integer, "64", "server and single stream: requests per run", {}, 1, 1000000},
      {"ttft_ms", axis_kind::string, "0", "server: time-to-first-token target (p99), ms; 0: none", {}, 0, 0},
      {"tpot_ms", axis_kind::string, "0", "server: time-per-output-token target (p99), ms; 0: none", {}, 0, 0},
      {"seed", axis_kind::integer, "1", "weights, prompts and arrivals", {}, 0, std::int64_t{1} << 62},
  };
  w.reject = [](const axis_values& v) -> std::string {
    const auto scenario = value_of(v, "scenario");
    if (scenario != "offline" && value_of(v, "loop") == "end_to_end")
      return "loop=end_to_end applies to scenario=offline (server and single stream copy every token to the host as "
             "it is made already)";
    if (scenario == "single_stream" && value_of(v, "batch") != "1")
      return "scenario=single_stream runs one request at a time: batch must be 1";
    if (value_of(v, "lm_head") == "fp8_e4m3" && value_of(v, "weights") != "fp8_e4m3")
      return fmt::format("lm_head=fp8_e4m3 with weights={}: the LM head is quantised as fp8 weights' projections "
                         "are; write weights=fp8_e4m3 (or lm_head=16bit)",
                         value_of(v, "weights"));
    // A 16-bit cache holds the activations as they are: the compute type, not the other 16-bit one.
    const auto kv = value_of(v, "kv"), compute = value_of(v, "compute");
    if ((kv == "bf16" || kv == "fp16") && !compute.empty() && kv != compute)
      return fmt::format("kv={} with compute={}: a 16-bit KV cache holds the compute type; write kv={} (or "
                         "kv=fp8_e4m3)",
                         kv, compute, compute);
    return {};
  };
  w.suite = [](const backend& dev) -> std::vector<axis_overrides> {
    if (dev.name() == "cpu") {
      const axis_overrides tiny = {{"model", "tiny"}, {"prompt", "32"}, {"output", "16"}};
      auto with = [&](axis_overrides extra) {
        auto g = tiny;
        g.insert(g.end(), extra.begin(), extra.end());
        return g;
      };
      return {with({{"batch", "1,4"}, {"loop", "compute,end_to_end"}}),
              with({{"scenario", "server"}, {"batch", "4"}, {"rate", "50"}, {"requests", "16"}}),
              with({{"scenario", "single_stream"}, {"requests", "8"}})};
    }
    return {
        {{"batch", "1,8,64"}, {"loop", "compute,end_to_end"}},
        {{"prompt", "2048"}, {"output", "1"}},
        {{"scenario", "server"}, {"batch", "64"}, {"rate", "4,16"}, {"requests", "128"}, {"ttft_ms", "1000"},
         {"tpot_ms", "50"}},
        {{"scenario", "single_stream"}, {"requests", "16"}},
    };
  };
  return w;
}

void run_cpu(case_state& st) {
  const llm_case c = read_case(st);
  // The cpu engine holds weights, cache and activations in fp32 whatever the storage precision.
  (void)check_memory(st, c, st.device().memory().free_bytes, 0, held_as::fp32);
  model_weights weights = c.checkpoint == "random" ? random_weights(c.config, c.weights, c.seed)
                                                   : load_checkpoint(c.checkpoint, c.weights, c.config.fp8_lm_head);
  cpu_engine_options o;
  o.slots = c.kind == scenario::single_stream ? 1 : c.batch;
  o.max_context = c.context;
  o.kv = c.kv;
  cpu_engine eng(std::move(weights), o);
  run_case(st, eng, c);
  // Quality against the precision above, each raised alone: the weights (fp8 against bf16, bf16 and
  // fp16 against fp32; the cache as the case's) and an fp8 KV cache (against the cache a bf16 case
  // holds, fp32 on this engine; the weights as the case's).
  const dtype case_kv = c.kv == dtype::fp8_e4m3 ? dtype::fp8_e4m3 : dtype::fp32;  // the reference model's cache
  const auto model_in = [&c](dtype storage, dtype kv) {
    return [&c, storage, kv](std::int64_t sequences, std::int64_t) {
      return reference_logits_model(c.checkpoint == "random"
                                        ? random_weights(c.config, storage, c.seed)
                                        : load_checkpoint(c.checkpoint, storage, c.config.fp8_lm_head),
                                    sequences, kv);
    };
  };
  if (c.weights != dtype::fp32) {
    const dtype ref = c.weights == dtype::fp8_e4m3 ? dtype::bf16 : dtype::fp32;
    record_quality(st, c, model_in(c.weights, case_kv), model_in(ref, case_kv),
                   fmt::format("{} weights on the cpu reference{}", dtype_name(ref),
                               case_kv == dtype::fp8_e4m3 ? " (fp8 e4m3 KV cache, as the case's)" : ""));
  }
  if (c.kv == dtype::fp8_e4m3)
    record_quality(st, c, model_in(c.weights, dtype::fp8_e4m3), model_in(c.weights, dtype::fp32),
                   "bf16 KV cache on the cpu reference (held there in fp32)", quality_of::kv_cache);
}

}  // namespace itera::llm
