#include "workloads/llm/scenarios.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "workloads/llm/checkpoint.hpp"
#include "workloads/llm/prompts.hpp"

namespace itera::llm {
namespace {

double parse_number(const std::string& axis, const std::string& text, bool positive) {
  double v = 0;
  std::size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(v) || (positive ? v <= 0 : v < 0))
    throw usage_error(fmt::format("axis {}: '{}' is not a {} number (for example --axis {}={})", axis, text,
                                  positive ? "positive" : "non-negative", axis, positive ? "4" : "0"));
  return v;
}

// "layers=8;hidden=2048" onto the preset; "preset" keeps it.
model_config apply_shape(model_config base, const std::string& spec) {
  if (spec == "preset" || spec.empty()) return base;
  std::vector<std::pair<std::string, std::string>> fields;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ';')) {
    const auto eq = item.find('=');
    const std::string name = item.substr(0, eq);
    if (eq == std::string::npos ||
        std::find(shape_fields().begin(), shape_fields().end(), name) == shape_fields().end())
      throw usage_error(fmt::format("axis shape: '{}' is not FIELD=VALUE with FIELD one of {} (for example "
                                    "--axis shape='layers=8;hidden=2048')",
                                    item, fmt::join(shape_fields(), ", ")));
    fields.emplace_back(name, item.substr(eq + 1));
  }
  return apply_shape_axes(std::move(base), fields);
}

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(fmt::format("prompts file {}: cannot be opened", path.string()));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw input_error(fmt::format("prompts file {}: read failed", path.string()));
  return std::move(s).str();
}

prompt_limits limits_for(const llm_case& c) {
  prompt_limits l;
  l.vocab = c.config.vocab;
  l.max_context = c.context;
  l.default_output = c.output;
  l.seed = c.seed;
  return l;
}

// Synthetic requests: request i is line i + 1 of a file of `count` lines {"prompt_len": P}.
std::vector<prompt_request> synthetic_requests(const llm_case& c, std::int64_t count) {
  std::vector<prompt_request> out(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    auto& r = out[static_cast<std::size_t>(i)];
    r.line = i + 1;
    r.tokens = synthetic_prompt(c.seed, r.line, c.prompt, c.config.vocab);
    r.output_tokens = c.output;
  }
  return out;
}

// The good lines of the prompts file; its bad lines recorded in the case (count, first messages).
std::vector<prompt_request> file_requests(case_state& st, const llm_case& c) {
  auto set = read_prompts(c.prompts, limits_for(c));
  if (!set.errors.empty()) {
    std::string first;
    for (std::size_t i = 0; i < std::min<std::size_t>(set.errors.size(), 5); ++i)
      first += (i ? "; " : "") + set.errors[i].message;
    st.set_detail("prompts.bad_lines", std::to_string(set.errors.size()));
    st.set_detail("prompts.rejected_too_long", std::to_string(set.rejected_too_long));
    st.set_detail("prompts.first_errors", first);
    st.add_metric("prompts/bad_lines", static_cast<double>(set.errors.size()), "lines");
  }
  if (set.requests.empty())
    throw usage_error(fmt::format("prompts file {}: no usable line ({} bad{}{})", c.prompts, set.errors.size(),
                                  set.errors.empty() ? "" : ": ", set.errors.empty() ? "" : set.errors[0].message));
  st.add_metric("prompts/good_lines", static_cast<double>(set.requests.size()), "lines");
  return std::move(set.requests);
}

// What generating `reqs` in waves of `batch` must do, in one pass over the waves: the least work
// of each wave's prefill and of its decode steps (over the sequences still generating), and the
// counts the figures divide by.
struct generation_plan {
  step_work prefill, decode, total;
  std::int64_t decode_steps = 0, prompt_tokens = 0, output_tokens = 0;
};

generation_plan plan_generation(const llm_case& c, std::span<const prompt_request> reqs) {
  generation_plan g;
  const auto add = [](step_work& into, const step_work& w) {
    into.weight_bytes_read += w.weight_bytes_read;
    into.kv_bytes_read += w.kv_bytes_read;
    into.kv_bytes_written += w.kv_bytes_written;
    into.flops += w.flops;
    into.tokens += w.tokens;
  };
  for (std::size_t first = 0; first < reqs.size(); first += static_cast<std::size_t>(c.batch)) {
    const auto wave = reqs.subspan(first, std::min(reqs.size() - first, static_cast<std::size_t>(c.batch)));
    std::vector<std::int64_t> lens;
    std::int64_t longest = 0;
    for (const auto& r : wave) {
      lens.push_back(static_cast<std::int64_t>(r.tokens.size()));
      longest = std::max(longest, r.output_tokens);
      g.prompt_tokens += static_cast<std::int64_t>(r.tokens.size());
      g.output_tokens += r.output_tokens;
    }
    add(g.prefill, prefill_work(c.config, c.weights, c.kv, lens));
    for (std::int64_t s = 1; s < longest; ++s) {
      std::vector<std::int64_t> context;
      for (const auto& r : wave)
        if (r.output_tokens > s) context.push_back(static_cast<std::int64_t>(r.tokens.size()) + s - 1);
      add(g.decode, decode_step_work(c.config, c.weights, c.kv, context));
    }
    g.decode_steps += longest - 1;
  }
  add(g.total, g.prefill);
  add(g.total, g.decode);
  return g;
}

// Whether every prompt of the wave has one length (one batched prefill from staged ids).
bool one_length(std::span<const prompt_request> wave) {
  return std::all_of(wave.begin(), wave.end(), [&](const auto& r) { return r.tokens.size() == wave[0].tokens.size(); });
}

std::vector<std::int32_t> concat_ids(std::span<const prompt_request> wave) {
  std::vector<std::int32_t> ids;
  for (const auto& r : wave) ids.insert(ids.end(), r.tokens.begin(), r.tokens.end());
  return ids;
}


void run_offline(case_state& st, engine& eng, const llm_case& c) {
  const bool e2e = c.way == loop::end_to_end;
  std::filesystem::path prompts_path, generations_path = scratch_dir() / "generations.jsonl";
  std::vector<prompt_request> reqs;
  if (c.prompts == "synthetic") {
    reqs = synthetic_requests(c, c.batch);
    if (e2e) {
      prompts_path = scratch_dir() / fmt::format("prompts-b{}-p{}-o{}.jsonl", c.batch, c.prompt, c.output);
      write_synthetic_prompts(prompts_path, c.batch, c.prompt, c.output);
    }
  } else {
    prompts_path = c.prompts;
    reqs = file_requests(st, c);
  }
  const generation_plan plan = plan_generation(c, reqs);
  st.set_work(plan.total.flops, plan.total.bytes_read(), plan.total.kv_bytes_written);
  st.add_metric("work/requests", static_cast<double>(reqs.size()), "requests");
  st.add_metric("work/output_tokens", static_cast<double>(plan.output_tokens), "tokens");
  if (e2e) st.set_detail("files.generations", generations_path.string());

  // Each wave's decode readied before timing (graph capture, product trials), as the harness's
  // warm-up repetition would, so that none lands in a timed one when no warm-up is asked for.
  const auto wave_rows = static_cast<std::int64_t>(std::min<std::size_t>(reqs.size(), static_cast<std::size_t>(c.batch)));
  eng.prepare_decode(wave_rows);
  if (const auto tail = static_cast<std::int64_t>(reqs.size() % static_cast<std::size_t>(c.batch)); tail > 0)
    eng.prepare_decode(tail);
  eng.synchronize();

  auto& rec = st.stages();
  if (!e2e) {
    // Compute-only: the ids are on the device before timing; nothing crosses inside a repetition.
    eng.stage_prompts(concat_ids(reqs));
    st.exec([&] { generate_wave(eng, rec, reqs, true, nullptr); });
  } else {
    std::vector<std::vector<std::int32_t>> generated(reqs.size());
    st.exec([&] {
      std::string text;
      {
        auto sc = rec.enter("read");
        text = read_text(prompts_path);
        sc.add_bytes_read(static_cast<double>(text.size()));
      }
      prompt_set set;
      {
        auto sc = rec.enter("parse");
        set = parse_prompts(text, limits_for(c));
      }
      if (set.requests.size() != reqs.size())
        throw input_error(fmt::format("prompts file {} changed during the run", prompts_path.string()));
      std::span<const prompt_request> all(set.requests);
      for (std::size_t first = 0; first < all.size(); first += static_cast<std::size_t>(c.batch)) {
        const auto wave = all.subspan(first, std::min(all.size() - first, static_cast<std::size_t>(c.batch)));
        const bool staged = one_length(wave);
        if (staged) {
          auto sc = rec.enter("h2d");
          const auto ids = concat_ids(wave);
          eng.stage_prompts(ids);
          sc.add_bytes_written(static_cast<double>(ids.size() * sizeof(std::int32_t)));
        }
        std::vector<std::vector<std::int32_t>> out(wave.size());
        generate_wave(eng, rec, wave, staged, &out);
        std::move(out.begin(), out.end(), generated.begin() + static_cast<std::ptrdiff_t>(first));
      }
      auto sc = rec.enter("write");
      const auto lines = format_generations(set.requests, generated);
      write_text_file(generations_path, lines);
      sc.add_bytes_written(static_cast<double>(lines.size()));
    });
  }

  st.on_finish([&st, c, plan](case_record& r) {
    const stage_record* p = r.find_stage("prefill");
    const stage_record* d = r.find_stage("decode");
    if (!p || !d) throw std::logic_error("llm offline: the prefill and decode stages were not recorded");
    // Each timed repetition (warm-up dropped) enters the prefill and decode stages once per wave.
    // The rates and latencies take the median repetition, the statistic of the case's own rate and
    // of the ceilings they are divided by (a mean here against a median there would count every
    // throttled repetition against the workload alone); the means are kept beside them.
    const double samples = static_cast<double>(r.device_ns.size());
    const double prefill_s = p->per_repetition_ns(samples) * 1e-9;
    const double decode_s = d->per_repetition_ns(samples) * 1e-9;
    const double prefill_mean_s = p->mean_ns(samples) * 1e-9;
    const double decode_mean_s = d->mean_ns(samples) * 1e-9;
    const double waves = static_cast<double>(p->calls) / samples;
    r.metrics.push_back({"latency/ttft", prefill_s / waves, "s"});
    r.metrics.push_back({"latency/ttft_mean", prefill_mean_s / waves, "s"});
    r.metrics.push_back(
        {"throughput/prefill_tokens_per_s", static_cast<double>(plan.prompt_tokens) / prefill_s, "tokens/s"});
    const double prefill_flops = plan.prefill.flops / prefill_s;
    r.metrics.push_back({"throughput/prefill_flops", prefill_flops, "FLOP/s"});
    // Against the ceiling of the products that ran: in the compute type (16-bit weights of the
    // other type are converted to it, fp8 weights dequantised to it or run on fp8 tensor cores,
    // counted here as the compute type's as before).
    const dtype products = c.weights == dtype::fp32 ? dtype::fp32 : c.compute;
    add_utilisation(r, st.ceilings(), "prefill/", fmt::format("gemm.{}", dtype_name(products)), prefill_flops);
    if (plan.decode_steps > 0 && decode_s > 0) {
      const double tpot = decode_s / static_cast<double>(plan.decode_steps);
      r.metrics.push_back({"latency/tpot", tpot, "s"});
      r.metrics.push_back({"latency/tpot_mean", decode_mean_s / static_cast<double>(plan.decode_steps), "s"});
      r.metrics.push_back({"throughput/decode_tokens_per_s", static_cast<double>(plan.decode.tokens) / decode_s, "tokens/s"});
      const double bandwidth = plan.decode.bytes_moved() / decode_s;
      r.metrics.push_back({"throughput/decode_bytes", bandwidth, "B/s"});
      add_utilisation(r, st.ceilings(), "decode/", "copy.d2d", bandwidth);
    }
    if (r.device_stats && r.device_stats->median > 0)
      r.metrics.push_back(
          {"throughput/output_tokens_per_s", static_cast<double>(plan.output_tokens) / (r.device_stats->median * 1e-9),
           "tokens/s"});
  });
}

// Server and single stream: a continuous-batching loop on the host clock.
void run_serving(case_state& st, engine& eng, const llm_case& c) {
  const bool single = c.kind == scenario::single_stream;
  std::vector<prompt_request> pool =
      c.prompts == "synthetic" ? synthetic_requests(c, c.requests) : file_requests(st, c);
  const auto request = [&](std::int64_t i) -> const prompt_request& {
    return pool[static_cast<std::size_t>(i) % pool.size()];
  };
  const auto n = static_cast<std::size_t>(c.requests);
  std::vector<double> arrival = single ? std::vector<double>(n, 0.0) : poisson_arrivals(c.rate, n, c.seed);
  std::vector<request_timeline> timeline(n);
  std::vector<std::int64_t> in_slot(static_cast<std::size_t>(eng.slots()), -1);

  // Warm-up outside the run: one request's prefill and a decode step (graphs, plans, clocks).
  {
    const auto& r = request(0);
    eng.stage_prompts(r.tokens);
    eng.prefill_staged(0, 1, static_cast<std::int64_t>(r.tokens.size()));
    if (r.output_tokens > 1) eng.decode(1);
    eng.record_ids(1);
    (void)eng.take_recorded();
    eng.release(0);
  }
  // The batch of a step is the highest busy slot + 1, any of 1..slots() as requests come and go:
  // each row count's first step would otherwise pay its setup (a CUDA graph's capture and its
  // product trials) inside the run, in the latencies of the requests in flight.
  for (std::int64_t rows = 1; rows <= eng.slots(); ++rows) eng.prepare_decode(rows);
  eng.synchronize();

  const auto t0 = std::chrono::steady_clock::now();
  const auto now = [&] { return seconds_between(t0, std::chrono::steady_clock::now()); };
  std::size_t next = 0, done = 0;
  std::int64_t steps = 0, busy = 0;
  double step_seconds = 0;
  while (done < n) {
    // Admissions: every request that has arrived, while a slot is free.
    while (next < n && arrival[next] <= now() && busy < eng.slots()) {
      const auto slot = static_cast<std::int64_t>(std::find(in_slot.begin(), in_slot.end(), -1) - in_slot.begin());
      const auto& r = request(static_cast<std::int64_t>(next));
      auto& tl = timeline[next];
      tl.scheduled = arrival[next];
      tl.prompt_tokens = static_cast<std::int64_t>(r.tokens.size());
      tl.admitted = std::max(now(), tl.scheduled);
      eng.stage_prompts(r.tokens);
      eng.prefill_staged(slot, 1, tl.prompt_tokens);
      eng.record_ids(slot + 1);
      (void)eng.take_recorded();
      tl.tokens.push_back(now());
      if (r.output_tokens <= 1) {
        eng.release(slot);
        ++done;
        if (single && next + 1 < n) arrival[next + 1] = now();
      } else {
        in_slot[static_cast<std::size_t>(slot)] = static_cast<std::int64_t>(next);
        ++busy;
      }
      ++next;
    }
    if (busy == 0) {
      if (next < n) {
        const double wait = arrival[next] - now();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      }
      continue;
    }
    std::int64_t rows = 0;
    for (std::int64_t i = 0; i < eng.slots(); ++i)
      if (in_slot[static_cast<std::size_t>(i)] >= 0) rows = i + 1;
    const double before = now();
    eng.decode(rows);
    eng.record_ids(rows);
    (void)eng.take_recorded();
    const double t = now();
    step_seconds += t - before;
    ++steps;
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto id = in_slot[static_cast<std::size_t>(i)];
      if (id < 0) continue;
      auto& tl = timeline[static_cast<std::size_t>(id)];
      tl.tokens.push_back(t);
      if (static_cast<std::int64_t>(tl.tokens.size()) >= request(id).output_tokens) {
        eng.release(i);
        in_slot[static_cast<std::size_t>(i)] = -1;
        --busy;
        ++done;
        if (single && next < n) arrival[next] = t;
      }
    }
  }

  const auto report = summarize_server(timeline, c.targets);
  std::vector<double> e2e_ns;
  for (const auto& tl : timeline) e2e_ns.push_back((tl.tokens.back() - tl.scheduled) * 1e9);
  st.record_samples(std::move(e2e_ns), "host_steady_clock_scheduled_arrival_to_last_token");
  st.on_finish([report, steps, step_seconds, single](case_record& r) {
    const auto put = [&](const std::string& name, const summary& s) {
      if (s.count == 0) return;
      r.metrics.push_back({"latency/" + name + "/p50", s.median, "s"});
      r.metrics.push_back({"latency/" + name + "/p90", s.percentiles.at(0).value, "s"});
      r.metrics.push_back({"latency/" + name + "/p99", s.percentiles.at(2).value, "s"});
      r.metrics.push_back({"latency/" + name + "/mean", s.mean, "s"});
    };
    put("ttft", report.ttft);
    put("tpot", report.tpot);
    put("itl", report.itl);
    put("e2e", report.e2e);
    if (!single) put("queue", report.queue);
    r.metrics.push_back({"load/requests", static_cast<double>(report.requests), "requests"});
    r.metrics.push_back({"load/completed", static_cast<double>(report.completed), "requests"});
    if (!single) r.metrics.push_back({"load/offered_rate", report.offered_rate, "requests/s"});
    r.metrics.push_back({"load/achieved_rate", report.achieved_rate, "requests/s"});
    r.metrics.push_back({"throughput/output_tokens_per_s", report.output_tokens_per_s, "tokens/s"});
    r.metrics.push_back({"load/meeting_targets", static_cast<double>(report.meeting_targets), "requests"});
    r.metrics.push_back({"load/goodput", report.goodput, "requests/s"});
    r.metrics.push_back({"load/meets_targets", report.meets_targets ? 1.0 : 0.0, "bool"});
    r.metrics.push_back({"load/decode_steps", static_cast<double>(steps), "steps"});
    if (steps > 0) r.metrics.push_back({"latency/decode_step_mean", step_seconds / static_cast<double>(steps), "s"});
  });
}

}  // namespace

void generate_wave(engine& eng, stage_recorder& rec, std::span<const prompt_request> wave, bool staged,
                   std::vector<std::vector<std::int32_t>>* out) {
  const auto n = static_cast<std::int64_t>(wave.size());
  {
    auto sc = rec.enter("prefill");
    if (staged) {
      eng.prefill_staged(0, n, static_cast<std::int64_t>(wave[0].tokens.size()));
    } else {
      for (std::int64_t i = 0; i < n; ++i) {
        const auto& r = wave[static_cast<std::size_t>(i)];
        eng.stage_prompts(r.tokens);
        eng.prefill_staged(i, 1, static_cast<std::int64_t>(r.tokens.size()));
      }
    }
    if (out) eng.record_ids(n);
  }
  std::int64_t longest = 0;
  for (const auto& r : wave) longest = std::max(longest, r.output_tokens);
  {
    auto sc = rec.enter("decode");
    for (std::int64_t s = 1; s < longest; ++s) {
      for (std::int64_t i = 0; i < n; ++i)
        if (wave[static_cast<std::size_t>(i)].output_tokens == s) eng.release(i);  // has all its tokens
      eng.decode(n);
      if (out) eng.record_ids(n);
    }
  }
  if (out) {
    auto sc = rec.enter("d2h");
    const auto rows = eng.take_recorded();
    for (std::int64_t i = 0; i < n; ++i) {
      auto& ids = (*out)[static_cast<std::size_t>(i)];
      ids.clear();
      for (std::int64_t k = 0; k < wave[static_cast<std::size_t>(i)].output_tokens; ++k)
        ids.push_back(rows.at(static_cast<std::size_t>(k)).at(static_cast<std::size_t>(i)));
    }
  }
  for (std::int64_t i = 0; i < n; ++i) eng.release(i);
}

std::filesystem::path scratch_dir() {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("itera-llm-{}", ::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

llm_case read_case(const case_state& st) {
  llm_case c;
  c.checkpoint = st.get_string("checkpoint");
  if (c.checkpoint == "random") {
    c.config = apply_shape(preset(st.get_string("model")), st.get_string("shape"));
  } else {
    if (st.get_string("shape") != "preset")
      throw usage_error("axis shape: a checkpoint brings its own shape; leave --axis shape at 'preset'");
    c.config = read_hf_config(std::filesystem::path(c.checkpoint) / "config.json");
  }
  c.weights = parse_dtype(st.get_string("weights"));
  c.config.fp8_lm_head = st.get_string("lm_head") == "fp8_e4m3";  // with fp8 weights (the decl's reject)
  validate(c.config);  // a tied table refuses it
  c.kv = parse_dtype(st.get_string("kv"));
  c.compute = parse_dtype(st.get_string("compute"));
  const auto& kind = st.get_string("scenario");
  c.kind = kind == "server" ? scenario::server : kind == "single_stream" ? scenario::single_stream : scenario::offline;
  c.way = st.get_string("loop") == "end_to_end" ? loop::end_to_end : loop::compute;
  c.batch = st.get_int("batch");
  c.prompt = st.get_int("prompt");
  c.output = st.get_int("output");
  c.prompts = st.get_string("prompts");
  c.requests = st.get_int("requests");
  c.seed = static_cast<std::uint64_t>(st.get_int("seed"));
  c.rate = parse_number("rate", st.get_string("rate"), true);
  c.targets.ttft_s = parse_number("ttft_ms", st.get_string("ttft_ms"), false) * 1e-3;
  c.targets.tpot_s = parse_number("tpot_ms", st.get_string("tpot_ms"), false) * 1e-3;
  if (c.way == loop::compute && c.kind == scenario::offline && c.prompts != "synthetic")
    throw usage_error("axis prompts: the compute-only loop runs synthetic prompts of --axis prompt tokens; a prompts "
                      "file is read by --axis loop=end_to_end (or scenario=server)");
  c.context = st.get_int("context");
  if (c.context == 0) {
    if (c.prompts == "synthetic") {
      c.context = c.prompt + c.output;
    } else {
      // The longest good line of the file, prompt plus output.
      prompt_limits l;
      l.vocab = c.config.vocab;
      l.max_context = c.config.max_position;
      l.default_output = c.output;
      l.seed = c.seed;
      const auto set = read_prompts(c.prompts, l);
      for (const auto& r : set.requests)
        c.context = std::max(c.context, static_cast<std::int64_t>(r.tokens.size()) + r.output_tokens);
      if (c.context == 0) c.context = std::min<std::int64_t>(c.config.max_position, c.prompt + c.output);
    }
  }
  if (c.context > c.config.max_position)
    throw usage_error(fmt::format("axis context: {} tokens exceed the {} tokens {} holds (max_position)", c.context,
                                  c.config.max_position, c.config.name));
  if (c.prompts == "synthetic" && c.prompt + c.output > c.context)
    throw usage_error(fmt::format("prompt of {} tokens + {} output tokens = {} exceed the context of {} (shorten "
                                  "--axis prompt or --axis output, or raise --axis context)",
                                  c.prompt, c.output, c.prompt + c.output, c.context));
  return c;
}

memory_request memory_needs(const llm_case& c, std::uint64_t workspace_bytes, held_as held, bool fp8_products) {
  memory_request r;
  r.config = c.config;
  const bool fp32 = held == held_as::fp32;
  r.weights = fp32 ? dtype::fp32 : c.weights;
  r.kv = fp32 ? dtype::fp32 : c.kv;
  r.activations = fp32 ? dtype::fp32 : c.compute;
  r.batch = c.kind == scenario::single_stream ? 1 : c.batch;
  r.context = c.context;
  // Offline prefills a whole batch at once; serving prefills one request at a time.
  r.prefill_batch = c.kind == scenario::offline ? r.batch : 1;
  r.prefill_tokens = c.prompts == "synthetic" ? c.prompt : c.context;
  r.workspace_bytes = workspace_bytes;
  r.fp8_products = fp8_products && !fp32;
  return r;
}

memory_plan check_memory(case_state& st, const llm_case& c, std::uint64_t free_bytes, std::uint64_t workspace_bytes,
                         held_as held, bool fp8_products) {
  const auto need = memory_needs(c, workspace_bytes, held, fp8_products);
  const auto plan = plan_memory(need);
  for (const auto& p : plan.parts) {
    std::string name = p.name;
    std::replace(name.begin(), name.end(), ' ', '_');
    st.add_metric("memory/plan/" + name, static_cast<double>(p.bytes), "B");
  }
  st.add_metric("memory/plan/total", static_cast<double>(plan.total_bytes()), "B");
  st.add_metric("memory/free_before", static_cast<double>(free_bytes), "B");
  st.add_metric("memory/largest_batch", static_cast<double>(largest_batch(need, free_bytes)), "sequences");
  st.add_metric("memory/largest_context", static_cast<double>(largest_context(need, free_bytes)), "tokens");
  if (!plan.fits(free_bytes)) throw case_skipped(plan.does_not_fit(free_bytes));
  const double headroom = static_cast<double>(free_bytes - plan.total_bytes());
  st.add_metric("memory/headroom", headroom, "B");
  // What the headroom would hold: more sequences of this context (their KV cache alone).
  st.add_metric("memory/headroom_sequences",
                std::floor(headroom / (kv_bytes_per_token(c.config, need.kv) * static_cast<double>(c.context))),
                "sequences");
  return plan;
}

void run_case(case_state& st, engine& eng, const llm_case& c) {
  st.set_field("model", c.config.name);
  st.set_field("precision.weights", std::string(dtype_name(c.weights)));
  // The LM head's storage: the weights' 16-bit type, bf16 beside fp8 weights unless the case
  // quantises it too (lm_head=fp8_e4m3).
  st.set_field("precision.lm_head", std::string(dtype_name(c.weights != dtype::fp8_e4m3 ? c.weights
                                                           : c.config.fp8_lm_head      ? dtype::fp8_e4m3
                                                                                       : dtype::bf16)));
  st.set_field("precision.kv_cache", std::string(dtype_name(c.kv)));
  st.set_field("precision.compute", std::string(dtype_name(c.compute)));
  st.set_field("precision.accumulate", "fp32");
  st.set_field("context", std::to_string(c.context));
  st.set_detail("precision.as_run", eng.precision_note());
  if (c.kind == scenario::offline)
    run_offline(st, eng, c);
  else
    run_serving(st, eng, c);
}

void record_quality(case_state& st, const llm_case& c, const logits_model_factory& test,
                    const logits_model_factory& reference, const std::string& reference_name, quality_of what) {
  const std::string part = what == quality_of::kv_cache ? "kv_cache" : what == quality_of::compute ? "compute" : "";
  const std::string metric = part.empty() ? "quality/" : "quality/" + part + "/";
  const std::string detail = part.empty() ? "quality." : "quality." + part + ".";
  const std::int64_t n = std::min<std::int64_t>(c.batch, 4), positions = std::min<std::int64_t>(c.output, 16);
  // Synthetic prompts of the case's length, within its context and the model's positions.
  const std::int64_t prompt_len =
      std::max<std::int64_t>(1, std::min({c.prompt, c.context, c.config.max_position - positions}));
  const model_config& m = c.config;
  const std::string key =
      fmt::format("{}|{},{},{},{},{},{},{}|{}|{}|{}{}|{}|{}|{}|{}|{}|{}", m.name, m.layers, m.hidden, m.heads,
                  m.kv_heads, m.head_dim, m.intermediate, m.vocab, c.checkpoint, c.seed, dtype_name(c.weights),
                  m.fp8_lm_head ? "+fp8_lm_head" : "", dtype_name(c.kv), dtype_name(c.compute),
                  metric, reference_name, prompt_len, n);
  static std::mutex cache_mutex;
  static std::map<std::string, quality_figures> cache;
  quality_figures f;
  bool cached = false;
  {
    const std::lock_guard lock(cache_mutex);
    if (auto it = cache.find(key); it != cache.end()) {
      f = it->second;
      cached = true;
    }
  }
  if (!cached) try {
    std::vector<std::int32_t> prompts;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto p = synthetic_prompt(c.seed, i, prompt_len, c.config.vocab);
      prompts.insert(prompts.end(), p.begin(), p.end());
    }
    const std::int64_t context = prompt_len + positions;
    quality_trace under_test;
    {
      auto model = test(n, context);
      under_test = trace_logits(*model, prompts, prompt_len, positions);
    }
    auto model = reference(n, context);
    const auto ref = trace_logits(*model, prompts, prompt_len, positions, &under_test);
    f = compare_traces(under_test, ref);
    const std::lock_guard lock(cache_mutex);
    cache.emplace(key, f);
  } catch (const std::exception& e) {
    // The case's timings stand: only the figures are left out, with the reason (a reference that
    // does not fit on this card once the tested model is gone, say).
    st.set_detail(detail + "not_measured", fmt::format("against {}: {}", reference_name, e.what()));
    return;
  }
  st.add_metric(metric + "logits_rel_error", f.logits_rel_error, "ratio");
  st.add_metric(metric + "top1_agreement", f.top1_agreement, "ratio");
  st.set_detail(detail + "reference", reference_name);
  st.set_detail(detail + "positions",
                fmt::format("{} ({} sequences x {} positions after synthetic prompts of {} tokens, the reference "
                            "fed the tested model's greedy tokens)",
                            f.positions, n, positions, prompt_len));
}

}  // namespace itera::llm
