// The generated images: deterministic, and compressing like photographs.
#include <gtest/gtest.h>

#include "tests/multimodal/test_support.hpp"
#include "workloads/multimodal/synth.hpp"

namespace itera::mm {
namespace {

TEST(MultimodalSynth, SameSeedSameBytesOtherSeedOtherImage) {
  const auto a = synthesize_photo(42, 200, 120);
  const auto b = synthesize_photo(42, 200, 120);
  const auto c = synthesize_photo(43, 200, 120);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_NE(a.pixels, c.pixels);
  EXPECT_EQ(encode_jpeg(a, 90), encode_jpeg(b, 90));
  EXPECT_EQ(encode_png(a), encode_png(b));
  // the size is part of the content: not a crop of one big image
  const auto d = synthesize_photo(42, 120, 200);
  EXPECT_NE(a.pixels, d.pixels);
}

TEST(MultimodalSynth, NeitherFlatNorSaturated) {
  const auto img = synthesize_photo(5, 256, 256);
  std::size_t histogram[256] = {};
  for (auto v : img.pixels) ++histogram[v];
  std::size_t used = 0, clipped = histogram[0] + histogram[255];
  for (auto h : histogram) used += h > 0;
  EXPECT_GT(used, 100u);                         // a wide range of levels
  EXPECT_LT(clipped, img.pixels.size() / 20);    // not blown out
}

// Photographs at JPEG quality 90 take about 1-4 bits per pixel (docs/multimodal.md, "Test set",
// cites the measurements: a 4000x1936 photo at q95 in 1.25 MB = 1.3 bpp; q90 ratios of 10:1 to 20:1
// on 24-bit RGB = 1.2-2.4 bpp; 13:1 = 1.85 bpp), while flat colour takes well under 0.1 and white
// noise over 8. PNG, lossless, takes several times more than JPEG on such content.
TEST(MultimodalSynth, JpegQuality90OfA1024ImageLandsInThePhotographBand) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    const auto img = synthesize_photo(seed, 1024, 1024);
    const double pixels = 1024.0 * 1024.0;
    const double jpeg_bpp = static_cast<double>(encode_jpeg(img, 90).size()) * 8 / pixels;
    const double png_bpp = static_cast<double>(encode_png(img).size()) * 8 / pixels;
    EXPECT_GT(jpeg_bpp, 1.0) << "seed " << seed;
    EXPECT_LT(jpeg_bpp, 4.0) << "seed " << seed;
    EXPECT_GT(png_bpp, 3.0 * jpeg_bpp) << "seed " << seed;
    EXPECT_LT(png_bpp, 20.0) << "seed " << seed;  // compressible: not noise (24 bpp raw)
  }
  // the band is not trivially met: flat colour and noise fall outside it
  const auto flat = test::make_image(1024, 1024, 90, 140, 200);
  EXPECT_LT(encode_jpeg(flat, 90).size() * 8 / (1024.0 * 1024.0), 0.2);
}

TEST(MultimodalSynth, RefusesEmptyOrHugeSizes) {
  EXPECT_THROW(synthesize_photo(1, 0, 10), std::invalid_argument);
  EXPECT_THROW(synthesize_photo(1, 10, 16385), std::invalid_argument);
}

TEST(MultimodalSynth, Splitmix64KnownValues) {
  // reference values of splitmix64 (Vigna's splitmix64.c, state 0 then 0x9E3779B97F4A7C15)
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
}

}  // namespace
}  // namespace itera::mm
