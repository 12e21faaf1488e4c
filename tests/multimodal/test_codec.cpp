// The codec: signatures, JPEG and PNG round trips, and every kind of bad file giving a decode
// failure (never a crash, never an allocation sized by a lying header).
#include <gtest/gtest.h>

#include "tests/multimodal/test_support.hpp"
#include "workloads/multimodal/image_codec.hpp"
#include "workloads/multimodal/synth.hpp"

namespace itera::mm {
namespace {

using test::psnr;

std::uint32_t crc32(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_be32(std::vector<std::uint8_t>& b, std::size_t at, std::uint32_t v) {
  b[at] = static_cast<std::uint8_t>(v >> 24);
  b[at + 1] = static_cast<std::uint8_t>(v >> 16);
  b[at + 2] = static_cast<std::uint8_t>(v >> 8);
  b[at + 3] = static_cast<std::uint8_t>(v);
}

// Message of the decode failure, or "" when the decode succeeded.
std::string failure(const std::vector<std::uint8_t>& bytes, const image_limits& limits = {}) {
  image_decoder d;
  try {
    d.decode(bytes, limits);
    return "";
  } catch (const decode_failure& e) {
    return e.what();
  }
}

const rgb_image& photo() {
  static const rgb_image img = synthesize_photo(7, 160, 96);
  return img;
}

TEST(MultimodalCodec, SniffsSignaturesNotNames) {
  const auto jpeg = encode_jpeg(photo(), 90);
  const auto png = encode_png(photo());
  EXPECT_EQ(sniff_format(jpeg), image_format::jpeg);
  EXPECT_EQ(sniff_format(png), image_format::png);
  EXPECT_EQ(sniff_format({}), image_format::empty);
  const std::string gif = "GIF89a\x01\x00\x01\x00";
  EXPECT_EQ(sniff_format({reinterpret_cast<const std::uint8_t*>(gif.data()), gif.size()}), image_format::gif);
  const std::string webp = std::string("RIFF\x10\0\0\0WEBPVP8 ", 16);
  EXPECT_EQ(sniff_format({reinterpret_cast<const std::uint8_t*>(webp.data()), webp.size()}), image_format::webp);
  const std::string text = "hello, this is not an image at all";
  EXPECT_EQ(sniff_format({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}), image_format::unknown);
}

TEST(MultimodalCodec, JpegRoundTripIsCloseToTheSource) {
  image_decoder d;
  const auto bytes = encode_jpeg(photo(), 90);
  const auto header = d.probe(bytes, {});
  EXPECT_EQ(header.format, image_format::jpeg);
  EXPECT_EQ(header.width, 160u);
  EXPECT_EQ(header.height, 96u);
  const auto back = d.decode(bytes, {});
  ASSERT_EQ(back.width, 160u);
  ASSERT_EQ(back.height, 96u);
  ASSERT_EQ(back.pixels.size(), photo().pixels.size());
  const double db = psnr(photo(), back);
  EXPECT_GT(db, 30.0);
  EXPECT_LT(db, 60.0);  // lossy: a decoder that returned the source would be cheating
  // quality matters: q=30 is further from the source than q=90
  EXPECT_LT(psnr(photo(), d.decode(encode_jpeg(photo(), 30), {})), db);
}

TEST(MultimodalCodec, PngRoundTripIsExact) {
  image_decoder d;
  const auto bytes = encode_png(photo());
  const auto back = d.decode(bytes, {});
  EXPECT_EQ(back.width, 160u);
  EXPECT_EQ(back.height, 96u);
  EXPECT_EQ(back.pixels, photo().pixels);
  const auto header = d.probe(bytes, {});
  EXPECT_EQ(header.format, image_format::png);
  EXPECT_EQ(header.width, 160u);
}

TEST(MultimodalCodec, OddSizesAndOneDecoderForManyImages) {
  image_decoder d;
  for (auto [w, h] : {std::pair{1u, 1u}, {3u, 17u}, {17u, 3u}, {255u, 1u}}) {
    const auto img = synthesize_photo(w * 131 + h, w, h);
    const auto png = d.decode(encode_png(img), {});
    EXPECT_EQ(png.pixels, img.pixels) << w << "x" << h;
    const auto jpg = d.decode(encode_jpeg(img, 95), {});
    EXPECT_EQ(jpg.width, w);
    EXPECT_EQ(jpg.height, h);
  }
}

TEST(MultimodalCodec, EmptyAndForeignFilesAreRefusedByName) {
  EXPECT_NE(failure({}).find("empty file (0 bytes)"), std::string::npos);
  const std::string gif = "GIF89a\x01\x00\x01\x00\x80\x00\x00";
  EXPECT_NE(failure({gif.begin(), gif.end()}).find("unsupported format: gif"), std::string::npos);
  const std::string text = "just some text that is not an image";
  EXPECT_NE(failure({text.begin(), text.end()}).find("not a JPEG or PNG file"), std::string::npos);
}

TEST(MultimodalCodec, TruncatedFilesAreErrors) {
  auto jpeg = encode_jpeg(photo(), 90);
  jpeg.resize(jpeg.size() / 2);
  const auto j = failure(jpeg);
  EXPECT_NE(j.find("JPEG data is damaged"), std::string::npos) << j;
  EXPECT_NE(j.find("Premature end"), std::string::npos) << j;
  auto png = encode_png(photo());
  png.resize(png.size() / 2);
  const auto p = failure(png);
  EXPECT_NE(p.find("PNG data is damaged"), std::string::npos) << p;
  // cut inside the header
  auto png_head = encode_png(photo());
  png_head.resize(20);
  EXPECT_NE(failure(png_head).find("PNG header is unreadable"), std::string::npos);
  auto jpeg_head = encode_jpeg(photo(), 90);
  jpeg_head.resize(40);
  EXPECT_NE(failure(jpeg_head).find("JPEG header is unreadable"), std::string::npos);
}

TEST(MultimodalCodec, CorruptFilesAreErrors) {
  auto jpeg = encode_jpeg(photo(), 90);
  for (std::size_t i = 3; i < 64; ++i) jpeg[i] = 0x55;  // garbled markers after SOI
  EXPECT_FALSE(failure(jpeg).empty());
  // a PNG whose IDAT has a flipped byte: CRC error on a critical chunk
  auto png = encode_png(photo());
  png[png.size() / 2] ^= 0x40;
  const auto p = failure(png);
  EXPECT_FALSE(p.empty());
  EXPECT_NE(p.find("PNG"), std::string::npos) << p;
}

TEST(MultimodalCodec, AbsurdDimensionsAreRefusedFromTheHeader) {
  // JPEG: SOF0 claims 60000x60000 (within JPEG's 65500 limit, far over ours)
  auto jpeg = encode_jpeg(photo(), 90);
  std::size_t sof = 0;
  for (std::size_t i = 2; i + 9 < jpeg.size(); ++i)
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      sof = i;
      break;
    }
  ASSERT_NE(sof, 0u);
  jpeg[sof + 5] = 60000 >> 8;
  jpeg[sof + 6] = 60000 & 0xFF;
  jpeg[sof + 7] = 60000 >> 8;
  jpeg[sof + 8] = 60000 & 0xFF;
  const auto j = failure(jpeg);
  EXPECT_NE(j.find("60000x60000"), std::string::npos) << j;
  EXPECT_NE(j.find("limit of 16384 per side"), std::string::npos) << j;

  // PNG: IHDR claims 100000x100000 with a correct CRC, so only our limit can refuse it
  auto png = encode_png(photo());
  put_be32(png, 16, 100000);
  put_be32(png, 20, 100000);
  put_be32(png, 29, crc32(png.data() + 12, 17));
  const auto p = failure(png);
  EXPECT_NE(p.find("100000x100000"), std::string::npos) << p;
  image_decoder d;
  EXPECT_THROW(d.probe(png, {}), decode_failure);

  // the pixel limit, separately from the side limit
  image_limits small;
  small.max_pixels = 160 * 96 - 1;
  const auto px = failure(encode_png(photo()), small);
  EXPECT_NE(px.find("15360 pixels, over the limit of 15359"), std::string::npos) << px;
  small.max_pixels = 160 * 96;
  EXPECT_EQ(failure(encode_png(photo()), small), "");
}

TEST(MultimodalCodec, EncoderRefusesBadArguments) {
  EXPECT_THROW(encode_jpeg(photo(), 0), std::invalid_argument);
  EXPECT_THROW(encode_jpeg(photo(), 101), std::invalid_argument);
  rgb_image empty;
  EXPECT_THROW(encode_png(empty), std::invalid_argument);
  rgb_image wrong = photo();
  wrong.pixels.pop_back();
  EXPECT_THROW(encode_jpeg(wrong, 90), std::invalid_argument);
}

}  // namespace
}  // namespace itera::mm
