#include "workloads/multimodal/preprocess.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "itera/core/errors.hpp"

namespace itera::mm {
namespace {

constexpr int precision_bits = resample_precision_bits;

double bicubic_kernel(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

}  // namespace

resample_weights bicubic_weights(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 2.0 * filterscale;
  resample_weights w;
  w.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  w.first.resize(out_size);
  w.count.resize(out_size);
  w.k.assign(static_cast<std::size_t>(out_size) * w.ksize, 0);
  std::vector<double> kd(w.ksize);
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int lo = static_cast<int>(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = static_cast<int>(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    const int n = hi - lo;
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
      kd[i] = bicubic_kernel((i + lo - center + 0.5) * ss);
      sum += kd[i];
    }
    for (int i = 0; i < n; ++i) {
      const double v = sum != 0.0 ? kd[i] / sum : kd[i];
      w.k[static_cast<std::size_t>(o) * w.ksize + i] =
          v < 0 ? static_cast<std::int32_t>(-0.5 + v * (1 << precision_bits))
                : static_cast<std::int32_t>(0.5 + v * (1 << precision_bits));
    }
    w.first[o] = lo;
    w.count[o] = n;
  }
  return w;
}

namespace {

std::uint8_t clip8(std::int32_t acc) {
  const std::int32_t v = acc >> precision_bits;  // arithmetic shift: floor
  return static_cast<std::uint8_t>(std::clamp(v, 0, 255));
}

}  // namespace

resize_mode parse_resize_mode(std::string_view name) {
  if (name == "crop") return resize_mode::crop;
  if (name == "tiles") return resize_mode::tiles;
  throw usage_error(fmt::format("resize mode '{}' is unknown: use crop (shortest side + centre crop) or tiles "
                                "(grid of tiles + thumbnail)",
                                name));
}

std::string_view resize_mode_name(resize_mode mode) { return mode == resize_mode::crop ? "crop" : "tiles"; }

void validate(const preprocess_config& c) {
  if (c.patch_size < 1 || c.image_size < c.patch_size)
    throw usage_error(fmt::format("preprocess: the patch size ({}) must be at least 1 and at most the image size ({}), "
                                  "e.g. 14 and 224",
                                  c.patch_size, c.image_size));
  if (c.image_size > 4096) throw usage_error(fmt::format("preprocess: image size {} is over 4096", c.image_size));
  for (int ch = 0; ch < 3; ++ch)
    if (!(c.std[ch] > 0) || !std::isfinite(c.mean[ch]))
      throw usage_error("preprocess: each std must be > 0 and each mean finite");
  if (c.min_tiles < 1 || c.min_tiles > c.max_tiles || c.max_tiles > 64)
    throw usage_error(fmt::format("preprocess: tiles must satisfy 1 <= min ({}) <= max ({}) <= 64", c.min_tiles,
                                  c.max_tiles));
}

rgb_image resize_bicubic(const rgb_image& in, std::uint32_t out_width, std::uint32_t out_height) {
  if (in.width == 0 || in.height == 0 || out_width == 0 || out_height == 0)
    throw std::invalid_argument(fmt::format("resize: {}x{} to {}x{}: sizes must be at least 1x1", in.width, in.height,
                                            out_width, out_height));
  if (in.pixels.size() != std::size_t{3} * in.width * in.height)
    throw std::invalid_argument("resize: the image's buffer does not match its size");
  const int iw = static_cast<int>(in.width), ih = static_cast<int>(in.height);
  const int ow = static_cast<int>(out_width), oh = static_cast<int>(out_height);
  if (iw == ow && ih == oh) return in;

  const auto vert = bicubic_weights(ih, oh);
  // Rows of the input the vertical pass reads.
  const int row_first = vert.first[0];
  const int row_last = vert.first[oh - 1] + vert.count[oh - 1];

  rgb_image temp;
  const rgb_image* src = &in;
  int src_row0 = 0;  // input row that src's row 0 is
  if (iw != ow) {
    const auto horiz = bicubic_weights(iw, ow);
    temp.width = out_width;
    temp.height = static_cast<std::uint32_t>(row_last - row_first);
    temp.pixels.resize(std::size_t{3} * temp.width * temp.height);
    for (int y = 0; y < static_cast<int>(temp.height); ++y) {
      const std::uint8_t* row = &in.pixels[std::size_t{3} * static_cast<std::size_t>(y + row_first) * in.width];
      std::uint8_t* out = &temp.pixels[std::size_t{3} * static_cast<std::size_t>(y) * temp.width];
      for (int x = 0; x < ow; ++x) {
        const std::int32_t* k = &horiz.k[static_cast<std::size_t>(x) * horiz.ksize];
        const int lo = horiz.first[x];
        std::int32_t s0 = 1 << (precision_bits - 1), s1 = s0, s2 = s0;
        for (int i = 0; i < horiz.count[x]; ++i) {
          const std::uint8_t* p = row + 3 * (lo + i);
          s0 += p[0] * k[i];
          s1 += p[1] * k[i];
          s2 += p[2] * k[i];
        }
        out[3 * x + 0] = clip8(s0);
        out[3 * x + 1] = clip8(s1);
        out[3 * x + 2] = clip8(s2);
      }
    }
    src = &temp;
    src_row0 = row_first;
  }
  if (ih == oh) return temp;  // horizontal pass only (it covered every row)

  rgb_image out;
  out.width = src->width;
  out.height = out_height;
  out.pixels.resize(std::size_t{3} * out.width * out.height);
  const std::size_t stride = std::size_t{3} * src->width;
  for (int y = 0; y < oh; ++y) {
    const std::int32_t* k = &vert.k[static_cast<std::size_t>(y) * vert.ksize];
    const int lo = vert.first[y] - src_row0;
    std::uint8_t* dst = &out.pixels[static_cast<std::size_t>(y) * stride];
    for (std::size_t x = 0; x < stride; ++x) {
      std::int32_t s = 1 << (precision_bits - 1);
      for (int i = 0; i < vert.count[y]; ++i) s += src->pixels[static_cast<std::size_t>(lo + i) * stride + x] * k[i];
      dst[x] = clip8(s);
    }
  }
  return out;
}

rgb_image crop(const rgb_image& in, std::uint32_t left, std::uint32_t top, std::uint32_t width, std::uint32_t height) {
  if (std::uint64_t{left} + width > in.width || std::uint64_t{top} + height > in.height || width == 0 || height == 0)
    throw std::invalid_argument(fmt::format("crop: {}x{} at ({}, {}) is not inside a {}x{} image", width, height, left,
                                            top, in.width, in.height));
  rgb_image out;
  out.width = width;
  out.height = height;
  out.pixels.resize(std::size_t{3} * width * height);
  for (std::uint32_t y = 0; y < height; ++y)
    std::copy_n(&in.pixels[3 * (std::size_t{top + y} * in.width + left)], std::size_t{3} * width,
                &out.pixels[std::size_t{3} * y * width]);
  return out;
}

std::pair<std::uint32_t, std::uint32_t> shortest_side_size(std::uint32_t width, std::uint32_t height,
                                                           std::uint32_t side) {
  if (width <= height)
    return {side, static_cast<std::uint32_t>(std::uint64_t{side} * height / width)};
  return {static_cast<std::uint32_t>(std::uint64_t{side} * width / height), side};
}

tile_grid choose_tile_grid(std::uint32_t width, std::uint32_t height, const preprocess_config& c) {
  std::vector<tile_grid> candidates;
  for (std::uint32_t cols = 1; cols <= c.max_tiles; ++cols)
    for (std::uint32_t rows = 1; rows <= c.max_tiles; ++rows)
      if (cols * rows >= c.min_tiles && cols * rows <= c.max_tiles) candidates.push_back({cols, rows});
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const tile_grid& a, const tile_grid& b) { return a.columns * a.rows < b.columns * b.rows; });
  const double aspect = static_cast<double>(width) / height;
  const double area = static_cast<double>(width) * height;
  const double s2 = static_cast<double>(c.image_size) * c.image_size;
  double best_diff = INFINITY;
  tile_grid best{1, 1};
  for (const auto& g : candidates) {
    const double diff = std::abs(aspect - static_cast<double>(g.columns) / g.rows);
    if (diff < best_diff) {
      best_diff = diff;
      best = g;
    } else if (diff == best_diff && area > 0.5 * s2 * g.columns * g.rows) {
      best = g;
    }
  }
  return best;
}

std::vector<rgb_image> make_views(const rgb_image& image, const preprocess_config& c) {
  validate(c);
  const std::uint32_t s = c.image_size;
  std::vector<rgb_image> views;
  if (c.mode == resize_mode::crop) {
    const auto [w, h] = shortest_side_size(image.width, image.height, s);
    const auto resized = resize_bicubic(image, w, h);
    views.push_back(crop(resized, (w - s) / 2, (h - s) / 2, s, s));
    return views;
  }
  const auto grid = choose_tile_grid(image.width, image.height, c);
  const auto resized = resize_bicubic(image, grid.columns * s, grid.rows * s);
  for (std::uint32_t t = 0; t < grid.columns * grid.rows; ++t)
    views.push_back(crop(resized, (t % grid.columns) * s, (t / grid.columns) * s, s, s));
  if (c.thumbnail && grid.columns * grid.rows > 1) views.push_back(resize_bicubic(image, s, s));
  return views;
}

std::vector<float> normalise_table(const preprocess_config& c) {
  std::vector<float> table(3 * 256);
  for (int ch = 0; ch < 3; ++ch) {
    const float mean = static_cast<float>(c.mean[ch]), std_ = static_cast<float>(c.std[ch]);
    for (int v = 0; v < 256; ++v) {
      // x = float32(double(v) / 255 as transformers' rescale computes it), then (x - mean) / std in float32
      const float x = static_cast<float>(static_cast<double>(v) * (1.0 / 255.0));
      table[static_cast<std::size_t>(ch * 256 + v)] = (x - mean) / std_;
    }
  }
  return table;
}

pixel_tensor normalise(const std::vector<rgb_image>& views, const preprocess_config& c) {
  const std::uint32_t s = c.image_size;
  pixel_tensor t;
  t.views = static_cast<std::uint32_t>(views.size());
  t.height = t.width = s;
  t.values.resize(std::size_t{t.views} * 3 * s * s);
  const std::vector<float> table = normalise_table(c);
  const std::size_t plane = std::size_t{s} * s;
  for (std::size_t n = 0; n < views.size(); ++n) {
    const auto& img = views[n];
    if (img.width != s || img.height != s)
      throw std::invalid_argument(fmt::format("normalise: view {} is {}x{}, not {}x{}", n, img.width, img.height, s, s));
    float* out = &t.values[n * 3 * plane];
    for (std::size_t i = 0; i < plane; ++i)
      for (int ch = 0; ch < 3; ++ch) out[ch * plane + i] = table[ch * 256 + img.pixels[3 * i + ch]];
  }
  return t;
}

pixel_tensor preprocess(const rgb_image& image, const preprocess_config& config) {
  return normalise(make_views(image, config), config);
}

std::vector<float> patchify_whole(const pixel_tensor& t, std::uint32_t p) {
  if (p == 0 || t.height < p || t.width < p)
    throw std::invalid_argument(fmt::format("patchify: patch {} does not fit {}x{}", p, t.width, t.height));
  const std::size_t gh = t.height / p, gw = t.width / p, plane = std::size_t{t.height} * t.width;
  const std::size_t patch_len = std::size_t{t.channels} * p * p;
  std::vector<float> out(std::size_t{t.views} * gh * gw * patch_len);
  std::size_t o = 0;
  for (std::size_t n = 0; n < t.views; ++n)
    for (std::size_t py = 0; py < gh; ++py)
      for (std::size_t px = 0; px < gw; ++px)
        for (std::size_t c = 0; c < t.channels; ++c)
          for (std::size_t dy = 0; dy < p; ++dy)
            for (std::size_t dx = 0; dx < p; ++dx)
              out[o++] = t.values[(n * t.channels + c) * plane + (py * p + dy) * t.width + px * p + dx];
  return out;
}

std::vector<float> patchify(const pixel_tensor& t, std::uint32_t p) {
  if (p == 0 || t.height % p != 0 || t.width % p != 0)
    throw std::invalid_argument(fmt::format("patchify: patch {} does not divide {}x{}", p, t.width, t.height));
  return patchify_whole(t, p);
}

std::uint16_t to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // quiet NaN stays NaN
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>(bits >> 16);
}

std::vector<std::uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<std::uint16_t> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), [](float v) { return to_bf16(v); });
  return out;
}

float from_bf16(std::uint16_t value) { return std::bit_cast<float>(std::uint32_t{value} << 16); }

}  // namespace itera::mm
