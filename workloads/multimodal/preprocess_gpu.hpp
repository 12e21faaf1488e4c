#pragma once
// The preprocessing stage on the GPU: decoded RGB8 images -> the views a ViT takes, bit for bit
// what the CPU reference (preprocess.hpp) computes: PIL's fixed-point bicubic resize (the same
// weight tables, bicubic_weights), the crop or tiles of make_views, CLIP normalisation through a
// 256-entry table per channel made on the host with the reference's float arithmetic, and the
// patchified bf16 layout the patch-embedding GEMM reads. Implemented in preprocess_cuda.cu (cuda
// builds only); the header has no CUDA types.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "itera/core/backend.hpp"
#include "workloads/multimodal/preprocess.hpp"

namespace itera::mm {

class gpu_preprocessor {
 public:
  // `dev` must be the cuda backend; std::invalid_argument otherwise. validate(config) applies.
  gpu_preprocessor(backend& dev, const preprocess_config& config);
  ~gpu_preprocessor();
  gpu_preprocessor(const gpu_preprocessor&) = delete;
  gpu_preprocessor& operator=(const gpu_preprocessor&) = delete;

  // Plans the views of `images` (host RGB8), copies the pixels and the weight tables to the device
  // and enqueues the resize and normalise kernels on the backend's stream; returns the number of
  // views. The outputs stay on the device until the next call.
  std::size_t enqueue(const std::vector<const rgb_image*>& images);

  // The same from RGB8 (HWC) images already on the backend's device, the GPU decode's output:
  // image i is images[i].width x .height at pixels + images[i].offset. Only the plan (weight
  // tables, jobs) is uploaded; `pixels` must stay valid until the kernels have run.
  struct device_image {
    std::uint32_t width = 0, height = 0;
    std::uint64_t offset = 0;  // bytes into the device buffer
  };
  std::size_t enqueue_device(const std::uint8_t* pixels, const std::vector<device_image>& images);

  // The device bytes a preprocessor allocates for one call on images of these sizes (its buffers
  // grow to the largest call; host_pixels: the host path's upload buffer too), without allocating.
  static std::uint64_t device_bytes(const preprocess_config& config,
                                    const std::vector<std::pair<std::uint32_t, std::uint32_t>>& sizes,
                                    bool host_pixels);

  std::size_t views() const;
  // Device pointers: NCHW float32 [views, 3, S, S] and patchified bf16 [views, G^2, 3*P*P], G = floor(S/P).
  const float* pixel_values() const;
  const std::uint16_t* patches() const;
  std::size_t host_bytes_uploaded() const;  // pixels and tables of the last enqueue

  // Waits and copies back (for verification and for the end-to-end loop's checks).
  std::vector<float> download_pixel_values() const;
  std::vector<std::uint16_t> download_patches() const;

 private:
  std::size_t run(const std::uint8_t* pixels, const std::vector<device_image>& images);
  struct impl;
  std::unique_ptr<impl> m;
};

}  // namespace itera::mm
