#include "workloads/multimodal/image_codec.hpp"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>

#include <fmt/format.h>
#include <png.h>
#include <turbojpeg.h>

namespace itera::mm {
namespace {

bool starts_with(std::span<const std::uint8_t> b, std::size_t at, std::string_view sig) {
  if (b.size() < at + sig.size()) return false;
  return std::memcmp(b.data() + at, sig.data(), sig.size()) == 0;
}

void check_dimensions(std::string_view what, std::uint64_t width, std::uint64_t height, const image_limits& limits) {
  if (width == 0 || height == 0)
    throw decode_failure(fmt::format("{} header gives an empty image ({}x{}): the file is corrupt", what, width, height));
  if (width > limits.max_side || height > limits.max_side)
    throw decode_failure(fmt::format(
        "{} header gives {}x{} pixels, over the limit of {} per side: downscale the image or raise the limit",
        what, width, height, limits.max_side));
  if (width * height > limits.max_pixels)
    throw decode_failure(fmt::format(
        "{} header gives {}x{} = {} pixels, over the limit of {} pixels: downscale the image or raise the limit",
        what, width, height, width * height, limits.max_pixels));
}

// Formats other than JPEG and PNG: named, so the message can say what the file is.
[[noreturn]] void refuse_format(image_format format) {
  if (format == image_format::empty) throw decode_failure("empty file (0 bytes): the file was not written completely");
  if (format == image_format::unknown)
    throw decode_failure("not a JPEG or PNG file (no known image signature in its first bytes)");
  throw decode_failure(fmt::format(
      "unsupported format: {} (the decoder reads JPEG and PNG; convert the file to one of them)", format_name(format)));
}

// ---- JPEG (TurboJPEG) ----

std::string tj_message(tjhandle tj) {
  const char* msg = tjGetErrorStr2(tj);
  return msg && *msg ? msg : "unknown error";
}

image_header jpeg_header(tjhandle tj, std::span<const std::uint8_t> bytes, const image_limits& limits, int& colorspace) {
  int width = 0, height = 0, subsamp = 0;
  colorspace = 0;
  if (tjDecompressHeader3(tj, bytes.data(), static_cast<unsigned long>(bytes.size()), &width, &height, &subsamp,
                          &colorspace) != 0)
    throw decode_failure(fmt::format("JPEG header is unreadable ({}): the file is corrupt or truncated",
                                     tj_message(tj)));
  if (width <= 0 || height <= 0)  // the data ended before the frame header: libjpeg reports no error
    throw decode_failure("JPEG header is unreadable (the data ends before the image dimensions): the file is "
                         "corrupt or truncated");
  check_dimensions("JPEG", static_cast<std::uint64_t>(width), static_cast<std::uint64_t>(height), limits);
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
    throw decode_failure("CMYK JPEG is not supported: convert the file to RGB");
  return {image_format::jpeg, static_cast<std::uint32_t>(width), static_cast<std::uint32_t>(height)};
}

// ---- PNG (libpng, setjmp error handling) ----
// libpng reports errors by longjmp. The functions that call setjmp below keep only trivially
// destructible locals, and nothing they set after setjmp is read after a longjmp, so the jump skips
// no destructor and reads no indeterminate value.

struct png_source {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t pos;
  char message[256];
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<png_source*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", msg ? msg : "unknown error");
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // warnings do not change the pixels read

void png_on_read(png_structp png, png_bytep out, std::size_t count) {
  auto* src = static_cast<png_source*>(png_get_io_ptr(png));
  if (src->size - src->pos < count) png_error(png, "the file ends before the image data does (truncated)");
  std::memcpy(out, src->data + src->pos, count);
  src->pos += count;
}

class png_reader {
 public:
  explicit png_reader(std::span<const std::uint8_t> bytes) {
    m_src.data = bytes.data();
    m_src.size = bytes.size();
    m_src.pos = 0;
    m_src.message[0] = '\0';
    m_png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &m_src, png_on_error, png_on_warning);
    if (!m_png) throw std::bad_alloc();
    m_info = png_create_info_struct(m_png);
    if (!m_info) {
      png_destroy_read_struct(&m_png, nullptr, nullptr);
      throw std::bad_alloc();
    }
    png_set_read_fn(m_png, &m_src, png_on_read);
  }
  ~png_reader() { png_destroy_read_struct(&m_png, &m_info, nullptr); }
  png_reader(const png_reader&) = delete;
  png_reader& operator=(const png_reader&) = delete;

  // Reads the chunks up to the image data and sets the transforms to RGB8. False on error.
  bool read_header(std::uint32_t& width, std::uint32_t& height) noexcept {
    if (setjmp(png_jmpbuf(m_png))) return false;
    png_set_user_limits(m_png, 0x7fffffff, 0x7fffffff);  // our own limits apply, with our message
    png_read_info(m_png, m_info);
    width = png_get_image_width(m_png, m_info);
    height = png_get_image_height(m_png, m_info);
    const int depth = png_get_bit_depth(m_png, m_info);
    const int type = png_get_color_type(m_png, m_info);
    if (depth == 16) png_set_strip_16(m_png);  // the high byte, as PIL
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(m_png);
    if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(m_png);
    if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(m_png);
    png_set_strip_alpha(m_png);  // also the alpha that palette expansion makes from tRNS
    m_passes = png_set_interlace_handling(m_png);
    png_read_update_info(m_png, m_info);
    m_rowbytes = png_get_rowbytes(m_png, m_info);
    m_channels = png_get_channels(m_png, m_info);
    m_depth = png_get_bit_depth(m_png, m_info);
    return true;
  }

  bool layout_is_rgb8(std::uint32_t width) const {
    return m_channels == 3 && m_depth == 8 && m_rowbytes == std::size_t{3} * width;
  }

  // Reads every row into `dst` (3 * width bytes per row). False on error.
  bool read_rows(std::uint8_t* dst, std::uint32_t width, std::uint32_t height) noexcept {
    if (setjmp(png_jmpbuf(m_png))) return false;
    const std::size_t stride = std::size_t{3} * width;
    for (int pass = 0; pass < m_passes; ++pass)
      for (std::uint32_t y = 0; y < height; ++y) png_read_row(m_png, dst + y * stride, nullptr);
    return true;
  }

  const char* message() const { return m_src.message; }

 private:
  png_source m_src{};
  png_structp m_png = nullptr;
  png_infop m_info = nullptr;
  int m_passes = 1;
  std::size_t m_rowbytes = 0;
  int m_channels = 0;
  int m_depth = 0;
};

void png_on_write(png_structp png, png_bytep data, std::size_t count) {
  auto* out = static_cast<std::vector<std::uint8_t>*>(png_get_io_ptr(png));
  bool failed = false;
  try {
    out->insert(out->end(), data, data + count);
  } catch (...) {
    failed = true;
  }
  if (failed) png_error(png, "out of memory");  // outside the handler: png_error does not return
}

void png_on_flush(png_structp) {}

bool png_write_rgb(png_structp png, png_infop info, const rgb_image& image) noexcept {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, image.width, image.height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, 6);
  png_write_info(png, info);
  const std::size_t stride = std::size_t{3} * image.width;
  for (std::uint32_t y = 0; y < image.height; ++y) png_write_row(png, image.pixels.data() + y * stride);
  png_write_end(png, nullptr);
  return true;
}

void check_image(const rgb_image& image) {
  if (image.width == 0 || image.height == 0 ||
      image.pixels.size() != std::size_t{3} * image.width * image.height)
    throw std::invalid_argument(fmt::format("encode: a {}x{} image needs {} bytes of RGB8, it has {}", image.width,
                                            image.height, std::size_t{3} * image.width * image.height,
                                            image.pixels.size()));
}

}  // namespace

std::string_view format_name(image_format format) {
  switch (format) {
    case image_format::empty: return "empty";
    case image_format::jpeg: return "jpeg";
    case image_format::png: return "png";
    case image_format::gif: return "gif";
    case image_format::bmp: return "bmp";
    case image_format::webp: return "webp";
    case image_format::tiff: return "tiff";
    case image_format::heif: return "heif";
    case image_format::avif: return "avif";
    case image_format::jpeg2000: return "jpeg2000";
    case image_format::jpegxl: return "jpegxl";
    case image_format::unknown: break;
  }
  return "unknown";
}

image_format sniff_format(std::span<const std::uint8_t> b) {
  using namespace std::string_view_literals;
  if (b.empty()) return image_format::empty;
  if (starts_with(b, 0, "\xFF\xD8\xFF"sv)) return image_format::jpeg;
  if (starts_with(b, 0, "\x89PNG\r\n\x1A\n"sv)) return image_format::png;
  if (starts_with(b, 0, "GIF87a"sv) || starts_with(b, 0, "GIF89a"sv)) return image_format::gif;
  if (starts_with(b, 0, "RIFF"sv) && starts_with(b, 8, "WEBP"sv)) return image_format::webp;
  if (starts_with(b, 0, "II*\0"sv) || starts_with(b, 0, "MM\0*"sv)) return image_format::tiff;
  if (starts_with(b, 4, "ftyp"sv)) {
    if (starts_with(b, 8, "avif"sv) || starts_with(b, 8, "avis"sv)) return image_format::avif;
    for (auto brand : {"heic"sv, "heix"sv, "hevc"sv, "heim"sv, "heis"sv, "mif1"sv, "msf1"sv})
      if (starts_with(b, 8, brand)) return image_format::heif;
  }
  if (starts_with(b, 0, "\0\0\0\x0CjP  \r\n\x87\n"sv) || starts_with(b, 0, "\xFF\x4F\xFF\x51"sv))
    return image_format::jpeg2000;
  if (starts_with(b, 0, "\xFF\x0A"sv) || starts_with(b, 0, "\0\0\0\x0CJXL \r\n\x87\n"sv)) return image_format::jpegxl;
  if (starts_with(b, 0, "BM"sv) && b.size() >= 26) return image_format::bmp;
  return image_format::unknown;
}

image_decoder::image_decoder() {
  m_tj = tjInitDecompress();
  if (!m_tj) throw std::runtime_error(fmt::format("libjpeg-turbo: cannot create a decompressor ({})", tjGetErrorStr2(nullptr)));
}

image_decoder::~image_decoder() {
  if (m_tj) tjDestroy(static_cast<tjhandle>(m_tj));
}

image_header image_decoder::probe(std::span<const std::uint8_t> bytes, const image_limits& limits) {
  const auto format = sniff_format(bytes);
  if (format == image_format::jpeg) {
    int colorspace = 0;
    return jpeg_header(static_cast<tjhandle>(m_tj), bytes, limits, colorspace);
  }
  if (format == image_format::png) {
    png_reader reader(bytes);
    std::uint32_t width = 0, height = 0;
    if (!reader.read_header(width, height))
      throw decode_failure(fmt::format("PNG header is unreadable ({}): the file is corrupt or truncated", reader.message()));
    check_dimensions("PNG", width, height, limits);
    return {image_format::png, width, height};
  }
  refuse_format(format);
}

void image_decoder::decode(std::span<const std::uint8_t> bytes, const image_limits& limits, rgb_image& out) {
  const auto format = sniff_format(bytes);
  out.width = out.height = 0;
  if (format == image_format::jpeg) {
    auto* tj = static_cast<tjhandle>(m_tj);
    int colorspace = 0;
    const auto header = jpeg_header(tj, bytes, limits, colorspace);
    out.pixels.resize(std::size_t{3} * header.width * header.height);
    if (tjDecompress2(tj, bytes.data(), static_cast<unsigned long>(bytes.size()), out.pixels.data(),
                      static_cast<int>(header.width), 0, static_cast<int>(header.height), TJPF_RGB,
                      TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0) {
      const bool warning = tjGetErrorCode(tj) == TJERR_WARNING;
      throw decode_failure(fmt::format("JPEG data is {} ({}): replace or re-encode the file",
                                       warning ? "damaged" : "undecodable", tj_message(tj)));
    }
    out.width = header.width;
    out.height = header.height;
    return;
  }
  if (format == image_format::png) {
    png_reader reader(bytes);
    std::uint32_t width = 0, height = 0;
    if (!reader.read_header(width, height))
      throw decode_failure(fmt::format("PNG header is unreadable ({}): the file is corrupt or truncated", reader.message()));
    check_dimensions("PNG", width, height, limits);
    if (!reader.layout_is_rgb8(width)) throw decode_failure("PNG layout could not be converted to 8-bit RGB");
    out.pixels.resize(std::size_t{3} * width * height);
    if (!reader.read_rows(out.pixels.data(), width, height))
      throw decode_failure(fmt::format("PNG data is damaged ({}): replace or re-encode the file", reader.message()));
    out.width = width;
    out.height = height;
    return;
  }
  refuse_format(format);
}

std::vector<std::uint8_t> encode_jpeg(const rgb_image& image, int quality) {
  if (quality < 1 || quality > 100)
    throw std::invalid_argument(fmt::format("JPEG quality must be 1..100, got {}", quality));
  check_image(image);
  tjhandle tj = tjInitCompress();
  if (!tj) throw std::runtime_error("libjpeg-turbo: cannot create a compressor");
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, image.pixels.data(), static_cast<int>(image.width), 0, static_cast<int>(image.height),
                             TJPF_RGB, &buffer, &size, TJSAMP_420, quality, TJFLAG_ACCURATEDCT);
  std::string message = rc != 0 ? tj_message(tj) : std::string();
  tjDestroy(tj);
  if (rc != 0) {
    tjFree(buffer);
    throw std::runtime_error("libjpeg-turbo: JPEG encoding failed: " + message);
  }
  std::vector<std::uint8_t> out(buffer, buffer + size);
  tjFree(buffer);
  return out;
}

std::vector<std::uint8_t> encode_png(const rgb_image& image) {
  check_image(image);
  png_source errors{};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &errors, png_on_error, png_on_warning);
  if (!png) throw std::bad_alloc();
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    throw std::bad_alloc();
  }
  std::vector<std::uint8_t> out;
  out.reserve(image.pixels.size() / 2);
  png_set_write_fn(png, &out, png_on_write, png_on_flush);
  const bool ok = png_write_rgb(png, info, image);
  png_destroy_write_struct(&png, &info);
  if (!ok) throw std::runtime_error(std::string("libpng: PNG encoding failed: ") + errors.message);
  return out;
}

}  // namespace itera::mm
