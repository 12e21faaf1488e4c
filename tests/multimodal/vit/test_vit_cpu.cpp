// The cpu reference of the vision encoder and projector against a naive implementation
// (naive_vit.hpp), in fp32 and in bf16 activations, and its input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "naive_vit.hpp"
#include "vit_test_support.hpp"
#include "workloads/gemm/numeric.hpp"
#include "workloads/multimodal/vit_cpu.hpp"

namespace itera::mm {
namespace {

using test::expect_usage_error;
using test::random_pixels;

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

bool all_bf16(const std::vector<float>& v) {
  for (const float x : v) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, 4);
    if ((bits & 0xffff) != 0) return false;
  }
  return true;
}

class VitCpuAgainstNaive : public ::testing::TestWithParam<const char*> {};

// fp32 activations: the two implementations differ only in summation order and precision (fp32
// sgemm against double loops), far below the 1e-5 allowed.
TEST_P(VitCpuAgainstNaive, Fp32Features) {
  const auto c = vit_preset(GetParam());
  const auto w = random_vit_weights(c, dtype::bf16, 7);
  const auto px = random_pixels(3, 3, static_cast<std::uint32_t>(c.image), 11);
  const vit_reference ref(w, dtype::fp32);
  const auto out = ref.run(px);
  ASSERT_EQ(out.features.images, 3);
  ASSERT_EQ(out.features.tokens, c.tokens());
  ASSERT_EQ(out.features.width, c.hidden);
  ASSERT_EQ(out.image_tokens.tokens, c.projector_tokens());
  ASSERT_EQ(out.image_tokens.width, c.llm_hidden);

  const test::naive_vit naive(w, false);
  const auto features = naive.features(px);
  const double e = normalised_error(out.features.values, to_float(features));
  EXPECT_LT(e, 1e-5) << GetParam();
  const double p = normalised_error(out.image_tokens.values, to_float(naive.project(features)));
  EXPECT_LT(p, 1e-5) << GetParam();
  // Not trivially small outputs: the check means something.
  double sum_squares = 0;
  for (const float v : out.features.values) sum_squares += double(v) * v;
  EXPECT_GT(std::sqrt(sum_squares / static_cast<double>(out.features.values.size())), 0.3);
}

// bf16 activations: every stored tensor is bf16, and the rounding points are the naive ones (the
// two still round differently where fp32 and double sums fall on either side of a bf16 tie).
TEST_P(VitCpuAgainstNaive, Bf16RoundsWhereTheGpuStores) {
  const auto c = vit_preset(GetParam());
  const auto w = random_vit_weights(c, dtype::bf16, 3);
  const auto px = random_pixels(2, 3, static_cast<std::uint32_t>(c.image), 5);
  const auto bf = vit_reference(w, dtype::bf16).run(px);
  const auto fp = vit_reference(w, dtype::fp32).run(px);
  EXPECT_TRUE(all_bf16(bf.features.values));
  EXPECT_TRUE(all_bf16(bf.image_tokens.values));
  EXPECT_FALSE(all_bf16(fp.features.values));
  // bf16 has 8 significant bits: about 2^-9 relative per rounding, a few roundings deep.
  const double drift = normalised_error(bf.features.values, fp.features.values);
  EXPECT_GT(drift, 1e-4);
  EXPECT_LT(drift, 3e-2);

  const test::naive_vit naive(w, true);
  const auto features = naive.features(px);
  const double e = normalised_error(bf.features.values, to_float(features));
  EXPECT_LT(e, 0.75 * drift) << "the naive bf16 reference agrees better with the cpu bf16 than fp32 does";
  EXPECT_LT(normalised_error(bf.image_tokens.values, to_float(naive.project(features))), 2e-2);
}

INSTANTIATE_TEST_SUITE_P(Presets, VitCpuAgainstNaive, ::testing::Values("tiny", "tiny-siglip"));

TEST(VitCpu, OtherShapesAgainstNaive) {
  // Every option off the presets' paths: both outer norms, gelu (erf), one channel, all tokens.
  for (const char* spec : {"norm=both;activation=gelu;channels=1;select=all", "norm=none;class_token=no;patch_bias=no",
                           "image=19",  // 4 x 4 patches, the last 3 rows and columns unread
                           "class_token=yes;patch_bias=yes;heads=1;layers=1;llm_hidden=32"}) {
    const auto c = apply_vit_shape(vit_preset("tiny"), spec);
    const auto w = random_vit_weights(c, dtype::bf16, 21);
    const auto px = random_pixels(2, static_cast<std::uint32_t>(c.channels), static_cast<std::uint32_t>(c.image), 2);
    const auto out = vit_reference(w, dtype::fp32).run(px);
    const test::naive_vit naive(w, false);
    const auto features = naive.features(px);
    EXPECT_LT(normalised_error(out.features.values, to_float(features)), 1e-5) << spec;
    EXPECT_LT(normalised_error(out.image_tokens.values, to_float(naive.project(features))), 1e-5) << spec;
  }
}

TEST(VitCpu, ImagesOfABatchAreIndependent) {
  const auto c = vit_preset("tiny");
  const auto w = random_vit_weights(c, dtype::bf16, 9);
  const auto batch = random_pixels(3, 3, 16, 4);
  const vit_reference ref(w, dtype::fp32);
  const auto all = ref.run(batch);
  const std::size_t per_image = std::size_t{3} * 16 * 16;
  for (std::uint32_t n = 0; n < 3; ++n) {
    pixel_tensor one = batch;
    one.views = 1;
    one.values.assign(batch.values.begin() + n * per_image, batch.values.begin() + (n + 1) * per_image);
    const auto single = ref.run(one);
    const std::size_t f = single.features.values.size(), p = single.image_tokens.values.size();
    EXPECT_LT(normalised_error(single.features.values,
                               std::span<const float>(all.features.values).subspan(n * f, f)),
              1e-6);
    EXPECT_LT(normalised_error(single.image_tokens.values,
                               std::span<const float>(all.image_tokens.values).subspan(n * p, p)),
              1e-6);
  }
}

TEST(VitCpu, PatchedInputEqualsPixelInput) {
  const auto c = vit_preset("tiny-siglip");
  const auto w = random_vit_weights(c, dtype::bf16, 2);
  const auto px = random_pixels(2, 3, 20, 8);
  const vit_reference ref(w, dtype::bf16);
  EXPECT_EQ(patch_rows(px, 4), patchify(px, 4));
  EXPECT_EQ(ref.encode(px).values, ref.encode_patches(patchify(px, 4), 2).values);
  // Past the grid: a 22-pixel side holds the same 5 x 5 patches as its top-left 20 x 20.
  auto wide = random_pixels(2, 3, 22, 9);
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t ch = 0; ch < 3; ++ch)
      for (std::size_t y = 0; y < 20; ++y)
        for (std::size_t x = 0; x < 20; ++x)
          wide.values[((n * 3 + ch) * 22 + y) * 22 + x] = px.values[((n * 3 + ch) * 20 + y) * 20 + x];
  EXPECT_EQ(patch_rows(wide, 4), patchify(px, 4));
  EXPECT_THROW((void)patch_rows(px, 21), std::invalid_argument);
}

TEST(VitCpu, ActivationFormulas) {
  // Values from the definitions: quick_gelu(1) = 1 / (1 + e^-1.702); gelu(1) = 0.5 (1 + erf(1/sqrt 2));
  // gelu_tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) x 1.044715)).
  EXPECT_NEAR(activate(vit_activation::quick_gelu, 1.0f), 0.845796, 1e-6);
  EXPECT_NEAR(activate(vit_activation::gelu, 1.0f), 0.841345, 1e-6);
  EXPECT_NEAR(activate(vit_activation::gelu_tanh, 1.0f), 0.841192, 1e-6);
  EXPECT_EQ(activate(vit_activation::gelu, 0.0f), 0.0f);
  EXPECT_NEAR(activate(vit_activation::quick_gelu, -10.0f), 0.0, 1e-6);
}

TEST(VitCpu, NormalisedError) {
  const std::vector<float> ref = {3, 4}, out = {3, 4.5};
  EXPECT_DOUBLE_EQ(normalised_error(out, ref), 0.1);
  EXPECT_EQ(normalised_error(std::vector<float>{0, 0}, std::vector<float>{0, 0}), 0.0);
  EXPECT_TRUE(std::isinf(normalised_error(std::vector<float>{1, 0}, std::vector<float>{0, 0})));
  EXPECT_THROW((void)normalised_error(std::vector<float>{1}, ref), std::invalid_argument);
}

TEST(VitCpu, InputErrorsNameBothShapes) {
  const auto c = vit_preset("tiny");
  const auto w = random_vit_weights(c, dtype::bf16, 1);
  const vit_reference ref(w, dtype::bf16);
  expect_usage_error([&] { (void)ref.encode(random_pixels(1, 3, 32, 1)); },
                     {"vision encoder tiny", "1 images of 3 x 32 x 32", "3 x 16 x 16", "image size 16"});
  expect_usage_error([&] { (void)ref.encode(random_pixels(2, 1, 16, 1)); }, {"2 images of 1 x 16 x 16"});
  expect_usage_error([&] { (void)ref.encode(random_pixels(0, 3, 16, 1)); }, {"0 images"});
  auto short_tensor = random_pixels(2, 3, 16, 1);
  short_tensor.values.resize(100);
  expect_usage_error([&] { (void)ref.encode(short_tensor); }, {"holds 100 values", "need 1536"});
  expect_usage_error([&] { (void)ref.encode_patches(std::vector<float>(47), 1); },
                     {"47 patch values for 1 images", "16 patches of 48"});
  token_tensor wrong{1, 16, 64, std::vector<float>(16 * 64)};
  expect_usage_error([&] { (void)ref.project(wrong); }, {"features are 1 x 16 x 64", "N x 17 x 64"});
  expect_usage_error([&] { vit_reference(w, dtype::fp16); }, {"activations are fp32 or bf16, not fp16"});
}

}  // namespace
}  // namespace itera::mm
