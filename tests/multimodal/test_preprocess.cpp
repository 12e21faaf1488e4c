// The CPU preprocessing reference, against values computed by hand (the derivations are in the
// comments) and pinned layouts. tests/multimodal/pil_reference.sh checks it against PIL itself on
// whole images.
#include <gtest/gtest.h>

#include <cmath>

#include "itera/core/errors.hpp"
#include "tests/multimodal/test_support.hpp"
#include "workloads/multimodal/preprocess.hpp"
#include "workloads/multimodal/synth.hpp"

namespace itera::mm {
namespace {

rgb_image grey_row(std::vector<std::uint8_t> values) {
  rgb_image img;
  img.width = static_cast<std::uint32_t>(values.size());
  img.height = 1;
  for (auto v : values) img.pixels.insert(img.pixels.end(), {v, v, v});
  return img;
}

std::vector<std::uint8_t> red(const rgb_image& img) {
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i < img.pixels.size(); i += 3) out.push_back(img.pixels[i]);
  return out;
}

// 4 -> 2 (downscale by 2): scale 2, support 4. Output 0: center 1.0, inputs [0, 4) with weights
// K((i - 1 + 0.5) / 2) = K(-0.25), K(0.25), K(0.75), K(1.25) = 0.8671875, 0.8671875, 0.2265625,
// -0.0703125 (K(x) = 1.5|x|^3 - 2.5|x|^2 + 1 below 1; -0.5|x|^3 + 2.5|x|^2 - 4|x| + 2 below 2), sum
// 1.890625, so 0.458678, 0.458678, 0.119835, -0.037190; in 2^22 fixed point 1923834, 1923834, 502623,
// -155987. [0, 100, 200, 255] -> (2^21 + 100*1923834 + 200*502623 - 255*155987) >> 22 = 60.
// Output 1 mirrors it (center 3.0): (2^21 - 0*155987 + 100*502623 + 200*1923834 + 255*1923834) >> 22
// = 221. (PIL 9.4 gives [60, 221].)
TEST(MultimodalPreprocess, BicubicDownscaleByHand) {
  const auto out = resize_bicubic(grey_row({0, 100, 200, 255}), 2, 1);
  EXPECT_EQ(out.width, 2u);
  EXPECT_EQ(out.height, 1u);
  EXPECT_EQ(out.pixels, (std::vector<std::uint8_t>{60, 60, 60, 221, 221, 221}));
}

// 2 -> 4 (upscale): scale 0.5, support 2. Output 0: center 0.25, inputs [0, 2): K(0.25) = 0.8671875
// and K(1.25) = -0.0703125, sum 0.796875 -> 1.088235, -0.088235: 10*1.088 - 200*0.088 < 0, clamped to
// 0. Output 1: center 0.75: K(-0.25), K(0.75) -> 0.792857, 0.207143: 10*0.793 + 200*0.207 = 49.36 ->
// 49. Outputs 2 and 3 mirror: 161 (160.64) and 217 (216.76). (PIL: [0, 49, 161, 217].)
TEST(MultimodalPreprocess, BicubicUpscaleByHandClampsOvershoot) {
  const auto out = resize_bicubic(grey_row({10, 200}), 4, 1);
  EXPECT_EQ(red(out), (std::vector<std::uint8_t>{0, 49, 161, 217}));
}

TEST(MultimodalPreprocess, ResizeIsSeparableAndKeepsFlatColour) {
  // flat colour stays flat at any size (weights sum to 1 in fixed point up to rounding)
  const auto flat = test::make_image(37, 23, 12, 130, 250);
  for (auto [w, h] : {std::pair{224u, 224u}, {5u, 3u}, {37u, 100u}, {80u, 23u}}) {
    const auto out = resize_bicubic(flat, w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    for (std::size_t i = 0; i < out.pixels.size(); i += 3) {
      ASSERT_EQ(out.pixels[i], 12);
      ASSERT_EQ(out.pixels[i + 1], 130);
      ASSERT_EQ(out.pixels[i + 2], 250);
    }
  }
  // same size: a copy; width only: each row resized alone; a column image, height only
  const auto img = synthesize_photo(9, 30, 20);
  EXPECT_EQ(resize_bicubic(img, 30, 20).pixels, img.pixels);
  const auto wide = resize_bicubic(img, 15, 20);
  for (std::uint32_t y = 0; y < 20; ++y) {
    rgb_image row;
    row.width = 30;
    row.height = 1;
    row.pixels.assign(img.pixels.begin() + y * 90, img.pixels.begin() + (y + 1) * 90);
    const auto r = resize_bicubic(row, 15, 1);
    ASSERT_TRUE(std::equal(r.pixels.begin(), r.pixels.end(), wide.pixels.begin() + y * 45)) << y;
  }
  EXPECT_THROW(resize_bicubic(img, 0, 5), std::invalid_argument);
}

TEST(MultimodalPreprocess, ShortestSideAndCentreCrop) {
  // floor(224 * 640 / 480) = floor(298.67) = 298; floor(224 * 1280 / 720) = 398
  EXPECT_EQ(shortest_side_size(640, 480, 224), (std::pair<std::uint32_t, std::uint32_t>{298, 224}));
  EXPECT_EQ(shortest_side_size(720, 1280, 224), (std::pair<std::uint32_t, std::uint32_t>{224, 398}));
  EXPECT_EQ(shortest_side_size(100, 100, 224), (std::pair<std::uint32_t, std::uint32_t>{224, 224}));
  // crop offsets floor((298 - 224) / 2) = 37 from the left; an odd excess rounds down:
  // 7x4 -> (S=2) 3x2, left floor((3 - 2) / 2) = 0
  rgb_image img;
  img.width = 7;
  img.height = 4;
  for (int i = 0; i < 28; ++i) img.pixels.insert(img.pixels.end(), {std::uint8_t(i), 0, 0});
  const auto c = crop(img, 2, 1, 3, 2);
  EXPECT_EQ(red(c), (std::vector<std::uint8_t>{9, 10, 11, 16, 17, 18}));
  EXPECT_THROW(crop(img, 5, 0, 3, 1), std::invalid_argument);
  preprocess_config cfg;
  cfg.image_size = 14;
  cfg.patch_size = 14;
  const auto views = make_views(synthesize_photo(1, 50, 30), cfg);
  ASSERT_EQ(views.size(), 1u);
  // 50x30 -> 23x14 (floor(14*50/30) = 23), crop from x = 4
  const auto resized = resize_bicubic(synthesize_photo(1, 50, 30), 23, 14);
  EXPECT_EQ(views[0].pixels, crop(resized, 4, 0, 14, 14).pixels);
}

TEST(MultimodalPreprocess, TileGridFollowsInternVL) {
  preprocess_config cfg;
  cfg.mode = resize_mode::tiles;
  cfg.image_size = 448;
  cfg.max_tiles = 12;
  const auto grid = [&](std::uint32_t w, std::uint32_t h) {
    const auto g = choose_tile_grid(w, h, cfg);
    return std::pair{g.columns, g.rows};
  };
  // aspect 2: (2,1) first; (4,2) ties and replaces it only when w*h > 0.5*448^2*8 = 802816
  EXPECT_EQ(grid(1000, 500), (std::pair{2u, 1u}));  // 500000 px
  EXPECT_EQ(grid(2048, 1024), (std::pair{4u, 2u}));  // 2097152 px
  // square: (1,1), then (2,2) when w*h > 0.5*448^2*4 = 401408, then (3,3) when > 903168
  EXPECT_EQ(grid(224, 224), (std::pair{1u, 1u}));
  EXPECT_EQ(grid(768, 768), (std::pair{2u, 2u}));    // 589824
  EXPECT_EQ(grid(1024, 1024), (std::pair{3u, 3u}));  // 1048576
  // 1280x720 (1.778): ratio 2 (diff 0.222) is the closest with c*r <= 12 (5/3 and 7/4 need 15 and 28
  // tiles); (2,1) then (4,2) ties, and 921600 > 802816 px takes (4,2). 720x1280: (2,4) likewise.
  EXPECT_EQ(grid(1280, 720), (std::pair{4u, 2u}));
  EXPECT_EQ(grid(720, 1280), (std::pair{2u, 4u}));
  // 640x480 (1.333): 4/3 exactly
  EXPECT_EQ(grid(640, 480), (std::pair{4u, 3u}));
  cfg.max_tiles = 1;
  EXPECT_EQ(grid(4000, 100), (std::pair{1u, 1u}));
  cfg.max_tiles = 6;
  EXPECT_EQ(grid(4000, 100), (std::pair{6u, 1u}));
}

TEST(MultimodalPreprocess, TilesAreCutRowMajorWithTheThumbnailLast) {
  preprocess_config cfg;
  cfg.mode = resize_mode::tiles;
  cfg.image_size = 28;
  cfg.patch_size = 14;
  // aspect 2 and 7200 px > 0.5*28^2*8 = 3136: (4,2), 8 tiles and the thumbnail
  const auto img = synthesize_photo(4, 120, 60);
  const auto views = make_views(img, cfg);
  ASSERT_EQ(views.size(), 9u);
  const auto resized = resize_bicubic(img, 112, 56);
  EXPECT_EQ(views[0].pixels, crop(resized, 0, 0, 28, 28).pixels);
  EXPECT_EQ(views[1].pixels, crop(resized, 28, 0, 28, 28).pixels);
  EXPECT_EQ(views[3].pixels, crop(resized, 84, 0, 28, 28).pixels);
  EXPECT_EQ(views[4].pixels, crop(resized, 0, 28, 28, 28).pixels);  // second row
  EXPECT_EQ(views[8].pixels, resize_bicubic(img, 28, 28).pixels);
  // 40x20: 800 px is not over 0.5*28^2*8, so (2,1) stays
  EXPECT_EQ(make_views(synthesize_photo(4, 40, 20), cfg).size(), 3u);
  cfg.thumbnail = false;
  EXPECT_EQ(make_views(img, cfg).size(), 8u);
  // one tile: no thumbnail, the image squashed to S x S
  cfg.thumbnail = true;
  const auto square = make_views(synthesize_photo(4, 20, 20), cfg);
  ASSERT_EQ(square.size(), 1u);
  EXPECT_EQ(square[0].pixels, resize_bicubic(synthesize_photo(4, 20, 20), 28, 28).pixels);
}

// y = (float(v / 255) - mean) / std in float32: v = 255, red: (1 - 0.48145466) / 0.26862954 =
// 1.9303361; v = 0, blue: -0.40821073 / 0.27577711 = -1.4802197; v = 128, green:
// (0.50196078 - 0.4578275) / 0.26130258 = 0.16889733.
TEST(MultimodalPreprocess, NormaliseByHandAndLayoutIsNCHW) {
  preprocess_config cfg;
  cfg.image_size = 2;
  cfg.patch_size = 1;
  rgb_image img = test::make_image(2, 2, 255, 128, 0);
  img.pixels[3 * 3 + 0] = 0;  // pixel (1, 1) red = 0
  const auto t = normalise({img}, cfg);
  ASSERT_EQ(t.values.size(), 12u);
  EXPECT_EQ(t.views, 1u);
  EXPECT_NEAR(t.values[0], 1.9303361f, 2e-7);   // c0 (0,0)
  EXPECT_NEAR(t.values[3], -1.7922626f, 2e-7);  // c0 (1,1) = 0: -0.48145466 / 0.26862954
  EXPECT_NEAR(t.values[4], 0.16889733f, 2e-7);  // c1 plane starts at 4
  EXPECT_NEAR(t.values[8], -1.4802197f, 2e-7);  // c2
  // exactly the float32 formula
  const float x = static_cast<float>(255.0 * (1.0 / 255.0));
  EXPECT_EQ(t.values[0], (x - 0.48145466f) / 0.26862954f);
  EXPECT_THROW(normalise({test::make_image(3, 2, 0, 0, 0)}, cfg), std::invalid_argument);
}

TEST(MultimodalPreprocess, PatchifyOrderIsConvWeightOrder) {
  // 1 view, 3 x 4 x 4, value = c*100 + y*10 + x; P = 2: patch (py, px) holds c, dy, dx in that order
  pixel_tensor t;
  t.views = 1;
  t.height = t.width = 4;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x) t.values.push_back(static_cast<float>(c * 100 + y * 10 + x));
  const auto p = patchify(t, 2);
  ASSERT_EQ(p.size(), 48u);  // 4 patches x 12
  // patch 0 (py 0, px 0): c0 [0 1 10 11], c1 [100 101 110 111], c2 [200 201 210 211]
  EXPECT_EQ(std::vector<float>(p.begin(), p.begin() + 12),
            (std::vector<float>{0, 1, 10, 11, 100, 101, 110, 111, 200, 201, 210, 211}));
  // patch 1 is (py 0, px 1); patch 2 is (py 1, px 0)
  EXPECT_EQ(p[12], 2.f);
  EXPECT_EQ(p[24], 20.f);
  EXPECT_EQ(p[47], 233.f);
  EXPECT_THROW(patchify(t, 3), std::invalid_argument);
}

TEST(MultimodalPreprocess, Bf16RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(to_bf16(-2.0f), 0xC000);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even (1.0)
  EXPECT_EQ(to_bf16(1.0f + 0x1.0p-8f), 0x3F80);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up
  EXPECT_EQ(to_bf16(1.0f + 3 * 0x1.0p-8f), 0x3F82);
  EXPECT_EQ(to_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f), 0x3F81);  // above halfway: up
  EXPECT_EQ(from_bf16(0x3F80), 1.0f);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(NAN))));
}

TEST(MultimodalPreprocess, FullPipelineShapesAndConfigChecks) {
  preprocess_config cfg;  // crop 224 / 14
  const auto t = preprocess(synthesize_photo(2, 640, 480), cfg);
  EXPECT_EQ(t.views, 1u);
  EXPECT_EQ(t.values.size(), 3u * 224 * 224);
  EXPECT_EQ(patchify(t, 14).size(), 256u * 588u);
  cfg.mode = resize_mode::tiles;
  cfg.image_size = 448;
  const auto tiles = preprocess(synthesize_photo(2, 2048, 1024), cfg);
  EXPECT_EQ(tiles.views, 9u);  // 4x2 + thumbnail
  preprocess_config bad;
  bad.patch_size = 15;  // 224 = 14 x 15 + 14: whole patches only, as SigLIP's 384 / 14
  EXPECT_NO_THROW(validate(bad));
  bad.patch_size = 225;  // larger than the image
  EXPECT_THROW(validate(bad), usage_error);
  bad.patch_size = 0;
  EXPECT_THROW(validate(bad), usage_error);
  bad = {};
  bad.std[1] = 0;
  EXPECT_THROW(validate(bad), usage_error);
  bad = {};
  bad.min_tiles = 5;
  bad.max_tiles = 4;
  EXPECT_THROW(validate(bad), usage_error);
  EXPECT_EQ(parse_resize_mode("tiles"), resize_mode::tiles);
  EXPECT_THROW(parse_resize_mode("squash"), usage_error);
}

}  // namespace
}  // namespace itera::mm
