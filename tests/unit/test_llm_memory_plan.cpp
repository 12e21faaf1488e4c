// The llm memory plan (R5): its parts add up as documented, a case that cannot fit says so with
// the numbers, and the largest batch or context it reports is the edge of what fits.
#include <gtest/gtest.h>

#include "itera/core/errors.hpp"
#include "workloads/llm/memory_plan.hpp"

namespace itera::llm {
namespace {

constexpr std::uint64_t gib = std::uint64_t{1} << 30;

TEST(LlmMemoryPlan, TinyPartsByHand) {
  memory_request r;
  r.config = preset("tiny");
  r.batch = 2;
  r.context = 100;
  r.workspace_bytes = 1 << 20;
  const auto plan = plan_memory(r);
  EXPECT_EQ(plan.bytes_of("weights"), 106'816u * 2);  // 2 x 16384 embedding/head + 2 x 36992 per layer + 64
  EXPECT_EQ(plan.bytes_of("kv cache"), 256u * 2 * 100);  // 2 (K, V) x 2 layers x 32 x 2 bytes per token
  // 200 rows (2 x 100-token prefill), every buffer the engine allocates: q_dim 64, kv_dim 32.
  const auto buffers = [](std::uint64_t rows, std::uint64_t a) {
    return rows * 64 * 4                   // residual (fp32)
           + rows * 64 * a                 // normed
           + rows * (64 + 2 * 32) * a      // qkv
           + rows * 64 * a                 // attention output
           + rows * 256 * a                // gate + up
           + rows * 128 * a                // mlp activation
           + 2 * 256 * 4                   // logits of the last positions
           + (rows * 4 + 2 * 8 + 8 * 4);   // prompt ids, next ids and lengths, RoPE frequencies
  };
  EXPECT_EQ(plan.bytes_of("activations"), buffers(200, 2));
  EXPECT_EQ(plan.bytes_of("workspace"), 1u << 20);
  EXPECT_EQ(plan.total_bytes(), 213'632u + 51'200u + buffers(200, 2) + (1u << 20));
  ASSERT_EQ(plan.activations.size(), 8u);
  EXPECT_EQ(plan.activations[4].name, "mlp gate+up");

  // A shorter prefill chunk shrinks the activations, not the cache.
  r.prefill_tokens = 10;
  const auto chunked = plan_memory(r);
  EXPECT_EQ(chunked.bytes_of("kv cache"), plan.bytes_of("kv cache"));
  EXPECT_EQ(chunked.bytes_of("activations"), buffers(20, 2));

  // fp8 KV halves the cache; fp32 activations double the bf16 buffers (the residual is fp32 already).
  r.kv = dtype::fp8_e4m3;
  r.activations = dtype::fp32;
  const auto other = plan_memory(r);
  EXPECT_EQ(other.bytes_of("kv cache"), plan.bytes_of("kv cache") / 2);
  EXPECT_EQ(other.bytes_of("activations"), buffers(20, 4));
}

// fp16 compute, fp16 weights and an fp16 cache take the bytes of bf16 ones, part by part and buffer
// by buffer (the dequantisation scratch of fp8 weights too): a 16-bit type is 2 bytes either way.
TEST(LlmMemoryPlan, Fp16TakesTheBytesOfBf16) {
  memory_request r;
  r.config = preset("tiny");
  r.batch = 3;
  r.context = 50;
  for (const dtype weights : {dtype::bf16, dtype::fp8_e4m3}) {
    const auto bf16_plan = [&] {
      auto b = r;
      b.weights = weights;
      return plan_memory(b);
    }();
    auto f = r;
    f.activations = dtype::fp16;
    f.weights = weights == dtype::bf16 ? dtype::fp16 : weights;
    f.kv = dtype::fp16;
    const auto fp16_plan = plan_memory(f);
    ASSERT_EQ(fp16_plan.parts.size(), bf16_plan.parts.size());
    for (std::size_t i = 0; i < bf16_plan.parts.size(); ++i) {
      EXPECT_EQ(fp16_plan.parts[i].name, bf16_plan.parts[i].name);
      EXPECT_EQ(fp16_plan.parts[i].bytes, bf16_plan.parts[i].bytes) << bf16_plan.parts[i].name;
    }
    ASSERT_EQ(fp16_plan.activations.size(), bf16_plan.activations.size());
    for (std::size_t i = 0; i < bf16_plan.activations.size(); ++i)
      EXPECT_EQ(fp16_plan.activations[i].bytes, bf16_plan.activations[i].bytes) << bf16_plan.activations[i].name;
  }
}

// fp8 weights add the scratch of the products above the GEMV's rows: the activations' codes and
// one scale per row (fp8 tensor cores), or one projection dequantised to bf16 (the largest: gate +
// up, 256 x 64 for tiny).
TEST(LlmMemoryPlan, Fp8WeightsCountTheirProductScratch) {
  memory_request r;
  r.config = preset("tiny");
  r.batch = 2;
  r.context = 100;
  r.weights = dtype::fp8_e4m3;
  const auto bf16_plan = [&] {
    auto b = r;
    b.weights = dtype::bf16;
    return plan_memory(b);
  }();
  r.fp8_products = true;
  const auto mma = plan_memory(r);
  EXPECT_EQ(mma.bytes_of("activations") - bf16_plan.bytes_of("activations"), 200u * (128 + 4))  // widest input: 128
      << "200 rows x (intermediate 128 codes + a scale)";
  EXPECT_EQ(mma.activations.back().name, "fp8 activation codes");
  r.fp8_products = false;
  const auto dequant = plan_memory(r);
  EXPECT_EQ(dequant.bytes_of("activations") - bf16_plan.bytes_of("activations"), 256u * 64 * 2);
  EXPECT_EQ(dequant.activations.back().name, "fp8 dequant scratch");
  EXPECT_LT(mma.bytes_of("weights"), bf16_plan.bytes_of("weights"));
  // An fp8 LM head (lm_head=fp8_e4m3; 1000 rows here, past the scratch): its codes and scales in the
  // weights, the scratch unchanged (the head is dequantised in slices of the largest projection).
  r.config.vocab = 1000;
  const auto bf16_head = plan_memory(r);
  r.config.fp8_lm_head = true;
  const auto fp8_head = plan_memory(r);
  EXPECT_EQ(bf16_head.bytes_of("weights") - fp8_head.bytes_of("weights"), 1000u * 64 * 2 - (1000u * 64 + 1000u * 4));
  EXPECT_EQ(fp8_head.bytes_of("activations"), bf16_head.bytes_of("activations"));
}

TEST(LlmMemoryPlan, DoesNotFitNamesTheNumbersLargestPartFirst) {
  memory_request r;
  r.config = preset("llama-3.1-8b");
  r.context = 8192;
  r.prefill_tokens = 512;
  const auto plan = plan_memory(r);
  EXPECT_EQ(plan.bytes_of("weights"), 16'060'522'496u);
  EXPECT_EQ(plan.bytes_of("kv cache"), 1 * gib);  // 128 KiB per token x 8192
  EXPECT_TRUE(plan.fits(80 * gib));
  EXPECT_EQ(plan.does_not_fit(80 * gib), "");
  EXPECT_FALSE(plan.fits(15 * gib));
  EXPECT_EQ(plan.does_not_fit(15 * gib),
            "does not fit: needs 16.08 GiB, 15.00 GiB free (weights 14.96 GiB, kv cache 1.00 GiB, activations 0.06 GiB, "
            "workspace 0.06 GiB)");

  r.batch = 64;
  const auto big = plan_memory(r);
  EXPECT_EQ(big.bytes_of("kv cache"), 64 * gib);
  const auto message = big.does_not_fit(80 * gib);
  EXPECT_EQ(message.rfind("does not fit: needs ", 0), 0u) << message;
  EXPECT_LT(message.find("kv cache 64.00 GiB"), message.find("weights 14.96 GiB")) << message;
}

TEST(LlmMemoryPlan, LargestBatchAndContextAreTheEdge) {
  memory_request r;
  r.config = preset("llama-3.1-8b");
  r.context = 4096;
  r.prefill_tokens = 512;
  const std::uint64_t free_bytes = 80 * gib;
  const auto b = largest_batch(r, free_bytes);
  EXPECT_GT(b, 100);  // ~65 GiB left at 0.5 GiB of cache per sequence
  EXPECT_LT(b, 131);
  r.batch = b;
  EXPECT_TRUE(plan_memory(r).fits(free_bytes));
  r.batch = b + 1;
  EXPECT_FALSE(plan_memory(r).fits(free_bytes));

  r.batch = 8;
  const auto n = largest_context(r, free_bytes);
  r.context = n;
  EXPECT_TRUE(plan_memory(r).fits(free_bytes));
  r.context = n + 1;
  EXPECT_FALSE(plan_memory(r).fits(free_bytes));

  // Offline prefills the whole batch (the workload states prefill_batch = batch): the edge is the
  // same as with the default; serving prefills one sequence at a time and holds more.
  memory_request offline = r;
  offline.context = 640;
  offline.prefill_tokens = 512;
  offline.batch = 64;
  offline.prefill_batch = 64;
  memory_request whole = offline;
  whole.prefill_batch = 0;
  const auto offline_edge = largest_batch(offline, free_bytes);
  EXPECT_EQ(offline_edge, largest_batch(whole, free_bytes));
  offline.batch = offline_edge;
  offline.prefill_batch = offline_edge;
  EXPECT_TRUE(plan_memory(offline).fits(free_bytes));
  memory_request serving = offline;
  serving.prefill_batch = 1;
  EXPECT_GT(largest_batch(serving, free_bytes), offline_edge);

  EXPECT_EQ(largest_batch(r, 10 * gib), 0) << "the weights alone do not fit";
  EXPECT_EQ(largest_context(r, 10 * gib), 0);

  memory_request t;
  t.config = preset("tiny");
  t.context = 512;
  EXPECT_EQ(largest_context(t, 1024 * gib), 512) << "capped at max_position";
}

TEST(LlmMemoryPlan, BadRequestsAreUsageErrors) {
  memory_request r;
  r.config = preset("tiny");
  r.context = 16;
  r.batch = 0;
  EXPECT_THROW(plan_memory(r), usage_error);
  r.batch = 1;
  r.context = 513;
  EXPECT_THROW(plan_memory(r), usage_error);
  r.context = 0;
  EXPECT_THROW(plan_memory(r), usage_error);
}

}  // namespace
}  // namespace itera::llm
