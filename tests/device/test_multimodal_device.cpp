// The multimodal workload's GPU preprocessing against its CPU reference (workloads/multimodal/
// preprocess.hpp), bit for bit: photo-like images of several sizes and aspects, crop and tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "workloads/multimodal/preprocess.hpp"
#include "workloads/multimodal/synth.hpp"

#if ITERA_WITH_CUDA
#include "itera/cuda/cuda_backend.hpp"
#include "workloads/multimodal/decode_gpu.hpp"
#include "workloads/multimodal/preprocess_gpu.hpp"
#endif
#include <cmath>

namespace {

#if !ITERA_WITH_CUDA

TEST(multimodal_device, preprocess_matches_cpu_reference) { GTEST_SKIP() << "built without the cuda backend"; }
TEST(multimodal_device, nvjpeg_decode) { GTEST_SKIP() << "built without the cuda backend"; }
TEST(multimodal_device, preprocess_in_place_after_nvjpeg) { GTEST_SKIP() << "built without the cuda backend"; }

#else

using namespace itera;

TEST(multimodal_device, preprocess_matches_cpu_reference) {
  const auto availability = cuda_availability();
  if (!availability.usable) GTEST_SKIP() << "no usable CUDA device: " << availability.reason;
  auto dev = make_cuda_backend(0);
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> sizes = {
      {224, 224}, {300, 200}, {200, 300}, {640, 480}, {1280, 720}, {720, 1280}, {2048, 2048}, {97, 61}};
  std::vector<mm::rgb_image> images;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    images.push_back(mm::synthesize_photo(1000 + i, sizes[i].first, sizes[i].second));
  std::vector<const mm::rgb_image*> batch;
  for (const auto& im : images) batch.push_back(&im);

  struct mode_case {
    mm::resize_mode mode;
    std::uint32_t side, patch;
  };
  // The last: SigLIP so400m's processor (the whole image to 384 x 384, 27 x 27 whole 14-px patches).
  for (const mode_case mc : {mode_case{mm::resize_mode::crop, 224, 14}, mode_case{mm::resize_mode::crop, 336, 14},
                             mode_case{mm::resize_mode::tiles, 448, 14}, mode_case{mm::resize_mode::crop, 384, 16},
                             mode_case{mm::resize_mode::tiles, 384, 14}}) {
    mm::preprocess_config cfg;
    cfg.mode = mc.mode;
    cfg.image_size = mc.side;
    cfg.patch_size = mc.patch;
    if (mc.side % mc.patch != 0) {
      cfg.min_tiles = cfg.max_tiles = 1;
      cfg.mean = mm::siglip_mean;
      cfg.std = mm::siglip_std;
    }
    // The reference, view by view, in batch order.
    std::vector<float> want_nchw;
    std::vector<std::uint16_t> want_patches;
    for (const auto& im : images) {
      const auto t = mm::preprocess(im, cfg);
      want_nchw.insert(want_nchw.end(), t.values.begin(), t.values.end());
      const auto p = mm::to_bf16(mm::patchify_whole(t, cfg.patch_size));
      want_patches.insert(want_patches.end(), p.begin(), p.end());
    }
    mm::gpu_preprocessor gpu(*dev, cfg);
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t views = gpu.enqueue(batch);
    const auto got_nchw = gpu.download_pixel_values();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const auto got_patches = gpu.download_patches();
    ASSERT_EQ(got_nchw.size(), want_nchw.size());
    ASSERT_EQ(got_patches.size(), want_patches.size());
    std::size_t nchw_diff = 0, patch_diff = 0;
    for (std::size_t i = 0; i < got_nchw.size(); ++i) nchw_diff += got_nchw[i] != want_nchw[i];
    for (std::size_t i = 0; i < got_patches.size(); ++i) patch_diff += got_patches[i] != want_patches[i];
    std::printf("preprocess %s %u/%u: %zu views from %zu images, %zu values; differing: %zu NCHW, %zu patch; "
                "upload + kernels + download %.2f ms\n",
                std::string(mm::resize_mode_name(mc.mode)).c_str(), mc.side, mc.patch, views, images.size(),
                got_nchw.size(), nchw_diff, patch_diff, ms);
    EXPECT_EQ(nchw_diff, 0u);
    EXPECT_EQ(patch_diff, 0u);
  }
}

// nvJPEG against libjpeg-turbo on the same files (the two differ in IDCT and chroma upsampling, so
// by PSNR, not bit for bit), bad files by index, then batches of 2048x2048 images timed: the
// issue's target is at most 2.5 ms per image in batches.
// decode=gpu: nvJPEG's pixels preprocessed where they lie (enqueue_device) give, bit for bit, what
// the host path gives on the same pixels downloaded (enqueue), including a bad file left out.
TEST(multimodal_device, preprocess_in_place_after_nvjpeg) {
  const auto availability = cuda_availability();
  if (!availability.usable) GTEST_SKIP() << "no usable CUDA device: " << availability.reason;
  if (const auto why = mm::nvjpeg_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  auto dev = make_cuda_backend(0);
  std::vector<std::vector<std::uint8_t>> files;
  for (auto [w, h] : std::vector<std::pair<std::uint32_t, std::uint32_t>>{{640, 480}, {300, 500}, {1024, 1024}})
    files.push_back(mm::encode_jpeg(mm::synthesize_photo(31 + w, w, h), 90));
  files.insert(files.begin() + 1, std::vector<std::uint8_t>{1, 2, 3});  // 1: not a JPEG
  std::vector<std::span<const std::uint8_t>> spans(files.begin(), files.end());
  mm::gpu_jpeg_decoder dec(*dev, 8);
  const auto r = dec.decode(spans, {});
  ASSERT_EQ(r.bad, (std::vector<std::size_t>{1}));
  mm::preprocess_config cfg;
  cfg.image_size = 336;
  cfg.patch_size = 14;
  mm::gpu_preprocessor in_place(*dev, cfg), from_host(*dev, cfg);
  std::vector<mm::gpu_preprocessor::device_image> on_device;
  std::vector<mm::rgb_image> downloaded;
  for (const std::size_t i : {0u, 2u, 3u}) {
    on_device.push_back({r.widths[i], r.heights[i], r.offsets[i]});
    downloaded.push_back(dec.download(r, i));
  }
  std::vector<const mm::rgb_image*> host;
  for (const auto& im : downloaded) host.push_back(&im);
  ASSERT_EQ(in_place.enqueue_device(dec.pixels(), on_device), 3u);
  ASSERT_EQ(from_host.enqueue(host), 3u);
  const auto a = in_place.download_patches(), b = from_host.download_patches();
  ASSERT_EQ(a.size(), b.size());
  std::size_t differ = 0;
  for (std::size_t k = 0; k < a.size(); ++k) differ += a[k] != b[k];
  std::printf("preprocess in place after nvJPEG: %zu of %zu patch values differ from the host path\n", differ, a.size());
  EXPECT_EQ(differ, 0u);
  EXPECT_LT(in_place.host_bytes_uploaded(), from_host.host_bytes_uploaded());  // no pixels uploaded
}

TEST(multimodal_device, nvjpeg_decode) {
  const auto availability = cuda_availability();
  if (!availability.usable) GTEST_SKIP() << "no usable CUDA device: " << availability.reason;
  if (const auto why = mm::nvjpeg_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  auto dev = make_cuda_backend(0);
  std::vector<std::vector<std::uint8_t>> files;
  std::vector<mm::rgb_image> sources;
  for (auto [w, h] : std::vector<std::pair<std::uint32_t, std::uint32_t>>{{224, 224}, {1280, 720}, {333, 517}, {2048, 2048}}) {
    sources.push_back(mm::synthesize_photo(7 + w, w, h));
    files.push_back(mm::encode_jpeg(sources.back(), 90));
  }
  files.push_back({});                                                 // 4: empty
  files.push_back(std::vector<std::uint8_t>(files[1].begin(), files[1].begin() + 100));  // 5: truncated header
  files.push_back(mm::encode_png(sources[0]));                         // 6: PNG
  std::vector<std::span<const std::uint8_t>> spans(files.begin(), files.end());
  mm::gpu_jpeg_decoder dec(*dev, 64);
  const auto r = dec.decode(spans, {});
  std::printf("nvJPEG backend: %s; %zu good, %zu bad\n", dec.backend_name().c_str(), r.good, r.bad.size());
  EXPECT_EQ(r.good, 4u);
  EXPECT_EQ(r.bad, (std::vector<std::size_t>{4, 5, 6}));
  mm::image_decoder cpu;
  for (std::size_t i = 0; i < 4; ++i) {
    const auto g = dec.download(r, i);
    mm::rgb_image c;
    cpu.decode(spans[i], {}, c);
    ASSERT_EQ(g.width, c.width);
    ASSERT_EQ(g.height, c.height);
    double se = 0;
    int max_diff = 0;
    for (std::size_t k = 0; k < g.pixels.size(); ++k) {
      const int d = int(g.pixels[k]) - int(c.pixels[k]);
      se += double(d) * d;
      max_diff = std::max(max_diff, std::abs(d));
    }
    const double psnr = 10 * std::log10(255.0 * 255.0 / std::max(se / g.pixels.size(), 1e-12));
    std::printf("  %ux%u: PSNR against libjpeg-turbo %.1f dB, max |diff| %d\n", g.width, g.height, psnr, max_diff);
    EXPECT_GT(psnr, 35.0);  // measured on the H200: 38.0 dB (224x224) to 51.7 dB; the two decoders upsample chroma differently
  }

  // Throughput: batches of 2048x2048 JPEGs (quality 90), decoded end to end from host bytes.
  std::vector<std::vector<std::uint8_t>> big;
  for (int i = 0; i < 32; ++i) big.push_back(mm::encode_jpeg(mm::synthesize_photo(100 + i, 2048, 2048), 90));
  for (std::size_t batch : {8, 32}) {
    std::vector<std::span<const std::uint8_t>> b(big.begin(), big.begin() + static_cast<std::ptrdiff_t>(batch));
    (void)dec.decode(b, {});  // warm-up
    std::vector<double> per_image;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto rr = dec.decode(b, {});
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ASSERT_EQ(rr.good, batch);
      per_image.push_back(ms / static_cast<double>(batch));
    }
    std::sort(per_image.begin(), per_image.end());
    std::printf("nvJPEG %s, batch %zu of 2048x2048: median %.3f ms per image (min %.3f, max %.3f; target 2.5)\n",
                dec.backend_name().c_str(), batch, per_image[2], per_image[0], per_image[4]);
    EXPECT_LE(per_image[2], 2.5);
  }
}

#endif

}  // namespace
