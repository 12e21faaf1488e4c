// The multimodal workload's GPU preprocessing against its CPU reference (workloads/multimodal/
// preprocess.hpp), bit for bit: photo-like images of several sizes and aspects, crop and tiles.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "workloads/multimodal/preprocess.hpp"
#include "workloads/multimodal/synth.hpp"

#if ITERA_WITH_CUDA
#include "itera/cuda/cuda_backend.hpp"
#include "workloads/multimodal/preprocess_gpu.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(multimodal_device, preprocess_matches_cpu_reference) { GTEST_SKIP() << "built without the cuda backend"; }

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
  for (const mode_case mc : {mode_case{mm::resize_mode::crop, 224, 14}, mode_case{mm::resize_mode::crop, 336, 14},
                             mode_case{mm::resize_mode::tiles, 448, 14}, mode_case{mm::resize_mode::crop, 384, 16}}) {
    mm::preprocess_config cfg;
    cfg.mode = mc.mode;
    cfg.image_size = mc.side;
    cfg.patch_size = mc.patch;
    // The reference, view by view, in batch order.
    std::vector<float> want_nchw;
    std::vector<std::uint16_t> want_patches;
    for (const auto& im : images) {
      const auto t = mm::preprocess(im, cfg);
      want_nchw.insert(want_nchw.end(), t.values.begin(), t.values.end());
      const auto p = mm::to_bf16(mm::patchify(t, cfg.patch_size));
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

#endif

}  // namespace
