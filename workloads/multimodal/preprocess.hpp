#pragma once
// The CPU reference of the image preprocessing stage: RGB8 image -> the tensor a ViT's patch
// embedding takes. The GPU kernel is verified against this, so every step is defined exactly.
//
// 1. Views (uint8 RGB images of side S = image_size):
//    crop mode (CLIP; transformers' CLIPImageProcessor):
//      resize so that the shorter side is S and the longer is floor(S * long / short), then crop the
//      centre S x S: top = (h' - S) / 2, left = (w' - S) / 2, integer division (floor).
//      One view.
//    tiles mode (InternVL's dynamic tiling):
//      grids (c columns, r rows) with min_tiles <= c*r <= max_tiles are candidates, in order of
//      c*r, then c, then r. The image's aspect w/h picks the grid whose c/r is closest (|w/h - c/r|,
//      in double); on an exact tie a later candidate replaces the chosen one only when
//      w*h > 0.5 * S*S * c*r (a large image takes the larger grid of the same shape). The image is
//      resized to (c*S) x (r*S), ignoring its aspect, and cut into c*r tiles, row-major. When
//      thumbnail is on and c*r > 1, the whole image resized to S x S is appended as the last view.
// 2. Resize: PIL's Image.resize(size, BICUBIC) on an RGB image, bit for bit (Pillow's
//    libImaging/Resample.c, 8 bits per channel):
//      separable, horizontal pass first (only over the rows the vertical pass reads), then
//      vertical; a pass is skipped when that dimension keeps its size; both sizes equal: a copy.
//      Per output index o along an axis of input size n and output size m:
//        scale = n / m; fs = max(scale, 1); support = 2 * fs   (cubic kernel, a = -0.5)
//        center = (o + 0.5) * scale
//        lo = max(0, int(center - support + 0.5)); hi = min(n, int(center + support + 0.5))
//        w_i = K((i - center + 0.5) / fs) for i in [lo, hi), then divided by their sum
//        K(x) = (1.5|x| - 2.5)|x|^2 + 1 for |x| < 1; -0.5(|x|^3 - 5|x|^2 + 8|x| - 4) for |x| < 2; else 0
//      all in double; weights then fixed-point: k_i = int(w_i * 2^22 + 0.5) (w_i >= 0) or
//      int(w_i * 2^22 - 0.5) (w_i < 0), truncation toward zero; each output channel is
//      clamp((2^21 + sum_i k_i * v_i) >> 22, 0, 255) in 32-bit integers (arithmetic shift). The
//      horizontal pass's output is stored as uint8 before the vertical pass reads it.
// 3. Normalise (transformers' rescale + normalize): x = float32(double(v) * (1.0 / 255.0)), then
//    y = (x - float32(mean[c])) / float32(std[c]) in float32 arithmetic.
// 4. Layout: NCHW float32 [N views, 3, S, S] (pixel_values); and the patchified view
//    [N, G^2, 3*P*P] with G = floor(S/P) (when P does not divide S, as SigLIP's 14 px patches of its
//    384 px input, the last S mod P rows and columns are not read, as its Conv2d does):
//    patch p = py * G + px (row-major over the patch grid), element
//    e = c*P*P + dy*P + dx, i.e. the order of a Conv2d(3, D, P, stride P) weight flattened to
//    [D, 3*P*P], so the patch embedding is one GEMM [N*(S/P)^2, 3*P*P] x [3*P*P, D].
//    bf16: round to nearest even of the float32 value (torch's .to(torch.bfloat16)).
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "workloads/multimodal/image_codec.hpp"

namespace itera::mm {

enum class resize_mode { crop, tiles };

// usage_error for anything but "crop" or "tiles".
resize_mode parse_resize_mode(std::string_view name);
std::string_view resize_mode_name(resize_mode mode);

// OpenAI CLIP's normalisation constants (transformers' OPENAI_CLIP_MEAN / OPENAI_CLIP_STD).
inline constexpr std::array<double, 3> clip_mean{0.48145466, 0.4578275, 0.40821073};
inline constexpr std::array<double, 3> clip_std{0.26862954, 0.26130258, 0.27577711};
// SigLIP's (transformers' IMAGENET_STANDARD_MEAN / _STD): [-1, 1].
inline constexpr std::array<double, 3> siglip_mean{0.5, 0.5, 0.5};
inline constexpr std::array<double, 3> siglip_std{0.5, 0.5, 0.5};

struct preprocess_config {
  resize_mode mode = resize_mode::crop;
  std::uint32_t image_size = 224;  // S: the encoder's input side (224, 336, 448, ...)
  std::uint32_t patch_size = 14;   // P: at most S (patches: floor(S/P)^2)
  std::array<double, 3> mean = clip_mean;
  std::array<double, 3> std = clip_std;
  std::uint32_t min_tiles = 1;     // tiles mode
  std::uint32_t max_tiles = 12;
  bool thumbnail = true;
};

// usage_error naming the bad field (S < P, a std <= 0, min > max tiles, ...).
void validate(const preprocess_config& config);

// Step 2's fixed-point weights of one axis (Pillow's PRECISION_BITS = 22): output o reads input
// indices [first[o], first[o] + count[o]) with weights k[o * ksize + i]. Shared by the CPU
// reference and the GPU kernel (preprocess_cuda.cu), which must agree bit for bit.
inline constexpr int resample_precision_bits = 32 - 8 - 2;
struct resample_weights {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<std::int32_t> k;
};
resample_weights bicubic_weights(int in_size, int out_size);

// PIL's bicubic resize (step 2). std::invalid_argument for an empty input or output size.
rgb_image resize_bicubic(const rgb_image& in, std::uint32_t out_width, std::uint32_t out_height);

// A rectangle of `in`; std::invalid_argument when it does not lie inside.
rgb_image crop(const rgb_image& in, std::uint32_t left, std::uint32_t top, std::uint32_t width, std::uint32_t height);

// The size crop mode resizes to before cropping: shorter side S, longer floor(S * long / short).
std::pair<std::uint32_t, std::uint32_t> shortest_side_size(std::uint32_t width, std::uint32_t height,
                                                           std::uint32_t side);

struct tile_grid {
  std::uint32_t columns = 1, rows = 1;
};
tile_grid choose_tile_grid(std::uint32_t width, std::uint32_t height, const preprocess_config& config);

// Step 1: the uint8 views, in output order.
std::vector<rgb_image> make_views(const rgb_image& image, const preprocess_config& config);

struct pixel_tensor {
  std::uint32_t views = 0, channels = 3, height = 0, width = 0;
  std::vector<float> values;  // NCHW
};

// Step 3 as a table: value[c * 256 + v] for channel c and uint8 v, the float32 arithmetic above.
// The CPU reference and the GPU kernel both read it.
std::vector<float> normalise_table(const preprocess_config& config);

// Steps 3 and 4 (NCHW). Every view must be S x S (std::invalid_argument otherwise).
pixel_tensor normalise(const std::vector<rgb_image>& views, const preprocess_config& config);

// All of it: make_views then normalise.
pixel_tensor preprocess(const rgb_image& image, const preprocess_config& config);

// [N, (H/P)*(W/P), 3*P*P] from NCHW; std::invalid_argument when P does not divide H and W.
std::vector<float> patchify(const pixel_tensor& tensor, std::uint32_t patch_size);
// The same over the whole patches only, when P does not divide the sides (SigLIP's 384 px with
// 14-px patches: 27 x 27 patches, the last 6 rows and columns unread, as its Conv2d does).
// std::invalid_argument when a side is below P.
std::vector<float> patchify_whole(const pixel_tensor& tensor, std::uint32_t patch_size);

std::uint16_t to_bf16(float value);
std::vector<std::uint16_t> to_bf16(const std::vector<float>& values);
float from_bf16(std::uint16_t value);

}  // namespace itera::mm
