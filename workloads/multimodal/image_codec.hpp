#pragma once
// Image files in memory <-> RGB8 pixels, on the CPU: JPEG with libjpeg-turbo (TurboJPEG API), PNG
// with libpng. This is the decode stage's work for one image and the encoder of the generated set.
//
// What a decoded image is, exactly (the GPU decoder is compared against it):
//   - RGB8, HWC, rows packed (stride = 3 * width), top row first.
//   - JPEG: libjpeg-turbo's accurate integer IDCT (JDCT_ISLOW) and "fancy" (triangular) chroma
//     upsampling: the library defaults, and what PIL does. Greyscale JPEGs come out as R=G=B.
//     CMYK/YCCK JPEGs are refused. Any libjpeg warning (a truncated file, corrupt entropy data) is an
//     error: the file is not what it claims. EXIF orientation is not applied (PIL's Image.open does
//     not either). Progressive files are limited to 500 scans (TJFLAG_LIMITSCANS), against files made
//     to take forever.
//   - PNG: palette expanded, grey expanded to RGB, 16-bit samples reduced to their high byte (as PIL
//     does for RGB/RGBA), alpha and tRNS dropped without compositing (PIL's convert("RGB")), no gamma
//     correction. Interlaced files are de-interlaced. Ancillary-chunk CRC errors are ignored
//     (libpng's default); critical ones are errors.
//   - Dimensions are checked from the header, before any pixel memory is allocated.
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace itera::mm {

enum class image_format { empty, jpeg, png, gif, bmp, webp, tiff, heif, avif, jpeg2000, jpegxl, unknown };

// "jpeg", "png", "gif", ... ; "empty" for a zero-byte file, "unknown" when no signature matched.
std::string_view format_name(image_format format);

// The format from the file's first bytes (its signature), never from its name.
image_format sniff_format(std::span<const std::uint8_t> bytes);

// Largest image the decoder accepts, checked from the header before allocating. Defaults: 16384 per
// side (nvJPEG's and many ViT pipelines' limit) and 2^27 pixels (134 Mpx, 384 MiB as RGB8: a 100 Mpx
// camera frame passes, a 16384x16384 one does not).
struct image_limits {
  std::uint32_t max_side = 16384;
  std::uint64_t max_pixels = std::uint64_t{1} << 27;
};

struct rgb_image {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::vector<std::uint8_t> pixels;  // HWC RGB8, 3 * width * height bytes
};

// Why one image could not be decoded. The message names the problem and what would fix it, never
// the file's name or contents (R18).
struct decode_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct image_header {
  image_format format = image_format::unknown;
  std::uint32_t width = 0;
  std::uint32_t height = 0;
};

// Decodes JPEG and PNG. Holds a TurboJPEG handle, so one per thread; reusing one across images
// saves the handle's setup. Methods throw decode_failure for bad data, std::bad_alloc when out of
// memory; nothing else.
class image_decoder {
 public:
  image_decoder();
  ~image_decoder();
  image_decoder(const image_decoder&) = delete;
  image_decoder& operator=(const image_decoder&) = delete;

  // Format and dimensions from the header only; checks them against `limits`.
  image_header probe(std::span<const std::uint8_t> bytes, const image_limits& limits);

  // Decodes into `out` (its buffer is reused when large enough).
  void decode(std::span<const std::uint8_t> bytes, const image_limits& limits, rgb_image& out);
  rgb_image decode(std::span<const std::uint8_t> bytes, const image_limits& limits) {
    rgb_image out;
    decode(bytes, limits, out);
    return out;
  }

 private:
  void* m_tj = nullptr;  // tjhandle
};

// JPEG at `quality` (1..100), 4:2:0 chroma subsampling, accurate integer DCT, standard Huffman
// tables: what a camera or PIL's default save writes. std::invalid_argument for a bad quality or an
// empty image; std::runtime_error if libjpeg-turbo fails.
std::vector<std::uint8_t> encode_jpeg(const rgb_image& image, int quality);

// PNG, 8-bit RGB, non-interlaced, zlib level 6 with libpng's adaptive filters (its defaults).
std::vector<std::uint8_t> encode_png(const rgb_image& image);

}  // namespace itera::mm
