#include "workloads/llm/memory_plan.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "itera/core/errors.hpp"

namespace itera::llm {
namespace {

std::uint64_t to_bytes(double bytes) { return static_cast<std::uint64_t>(std::llround(bytes)); }

}  // namespace

std::uint64_t memory_plan::total_bytes() const {
  std::uint64_t sum = 0;
  for (const auto& p : parts) sum += p.bytes;
  return sum;
}

std::uint64_t memory_plan::bytes_of(std::string_view part) const {
  for (const auto& p : parts)
    if (p.name == part) return p.bytes;
  return 0;
}

std::string format_gib(std::uint64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(std::uint64_t{1} << 30));
}

std::string memory_plan::does_not_fit(std::uint64_t free_bytes) const {
  if (fits(free_bytes)) return {};
  auto sorted = parts;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  std::string detail;
  for (const auto& p : sorted) detail += fmt::format("{}{} {}", detail.empty() ? "" : ", ", p.name, format_gib(p.bytes));
  return fmt::format("does not fit: needs {}, {} free ({})", format_gib(total_bytes()), format_gib(free_bytes), detail);
}

memory_plan plan_memory(const memory_request& r) {
  const model_config& c = r.config;
  validate(c);
  if (r.batch < 1) throw usage_error(fmt::format("memory plan: batch must be at least 1, got {}", r.batch));
  if (r.context < 1 || r.context > c.max_position)
    throw usage_error(fmt::format("memory plan: context {} is outside 1..{} (max_position of {})", r.context,
                                  c.max_position, c.name));
  const std::int64_t prefill = r.prefill_tokens > 0 ? std::min(r.prefill_tokens, r.context) : r.context;

  const double a = bytes_per_element(r.activations);
  const std::int64_t prefill_batch = r.prefill_batch > 0 ? std::min(r.prefill_batch, r.batch) : r.batch;
  const double rows = static_cast<double>(std::max(prefill_batch * prefill, r.batch));
  const double hidden = static_cast<double>(c.hidden), qd = static_cast<double>(c.q_dim());
  const double kvd = static_cast<double>(c.kv_dim()), inter = static_cast<double>(c.intermediate);

  memory_plan plan;
  // Every buffer of the engine is allocated for the whole run (none is freed between phases), so
  // the activations are their sum. The residual stream is fp32 whatever the compute precision.
  plan.activations = {
      {"residual", to_bytes(rows * hidden * 4)},
      {"normed", to_bytes(rows * hidden * a)},
      {"qkv", to_bytes(rows * (qd + 2 * kvd) * a)},
      {"attention output", to_bytes(rows * qd * a)},
      {"mlp gate+up", to_bytes(rows * 2 * inter * a)},
      {"mlp activation", to_bytes(rows * inter * a)},
      {"logits", to_bytes(static_cast<double>(r.batch) * static_cast<double>(c.vocab) * 4)},
      // prompt ids, next ids, lengths; RoPE inverse frequencies
      {"token ids", to_bytes(rows * 4 + static_cast<double>(r.batch) * 8 + static_cast<double>(c.head_dim / 2) * 4)},
  };
  // fp8 weights, products above the cuda engine's GEMV rows (llm_cuda.hpp): on fp8 tensor cores
  // the activations are quantised per token into one scratch sized for the widest input, with a
  // scale per row; otherwise a projection at a time (an fp8 LM head in slices of that size) is
  // dequantised into a scratch of the 16-bit compute type (bf16 or fp16: 2 bytes an element).
  if (r.weights == dtype::fp8_e4m3 && r.fp8_products)
    plan.activations.push_back({"fp8 activation codes", to_bytes(rows * (std::max({hidden, qd, inter}) + 4))});
  else if (r.weights == dtype::fp8_e4m3)
    plan.activations.push_back(
        {"fp8 dequant scratch",
         to_bytes(2.0 * std::max({(qd + 2 * kvd) * hidden, hidden * qd, 2 * inter * hidden, hidden * inter}))});
  std::uint64_t activation_bytes = 0;
  for (const auto& p : plan.activations) activation_bytes += p.bytes;

  const double kv_tokens = static_cast<double>(r.batch) * static_cast<double>(r.context);
  plan.parts = {
      {"weights", to_bytes(weight_bytes(c, r.weights))},
      {"kv cache", to_bytes(kv_bytes_per_token(c, r.kv) * kv_tokens)},
      {"activations", activation_bytes},
      {"workspace", r.workspace_bytes},
  };
  return plan;
}

namespace {

// The largest value in [1, limit] for which fits(value) holds, fits being monotone; 0 if none.
template <class Fits>
std::int64_t largest_fitting(std::int64_t limit, Fits fits) {
  if (limit < 1 || !fits(1)) return 0;
  std::int64_t good = 1, bad = limit + 1;  // fits(good) holds; fits(bad) does not, or bad is past the limit
  while (good < limit) {  // doubling finds the bracket in log steps
    const std::int64_t probe = good > limit / 2 ? limit : good * 2;
    if (!fits(probe)) {
      bad = probe;
      break;
    }
    good = probe;
  }
  while (bad - good > 1) {
    const std::int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good;
}

}  // namespace

std::int64_t largest_batch(memory_request r, std::uint64_t free_bytes) {
  // A prefill of the whole batch (offline) grows with it; a fixed prefill batch (serving) does not.
  // (Keeping it fixed for offline overstated the limit by 1.8x: 1578 against 880 sequences of 640
  // tokens on the H200, found by the memory fit.)
  const bool whole_batch_prefill = r.prefill_batch <= 0 || r.prefill_batch >= r.batch;
  // A batch past 2^31 sequences is not a plan anyone runs; it also bounds the search.
  return largest_fitting(std::int64_t{1} << 31, [&](std::int64_t b) {
    r.batch = b;
    if (whole_batch_prefill) r.prefill_batch = b;
    return plan_memory(r).fits(free_bytes);
  });
}

std::int64_t largest_context(memory_request r, std::uint64_t free_bytes) {
  return largest_fitting(r.config.max_position, [&](std::int64_t n) {
    r.context = n;
    return plan_memory(r).fits(free_bytes);
  });
}

}  // namespace itera::llm
