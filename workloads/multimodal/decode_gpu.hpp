#pragma once
// The decode stage on the GPU: batched JPEG decoding with nvJPEG into one device buffer of RGB8
// (HWC). nvJPEG is loaded at run time (dlopen of libnvjpeg.so.13 or .12, the prototypes declared
// in decode_gpu_cuda.cpp from the nvJPEG documentation), so a build without its header still has
// the stage where the library is installed, and says why not where it is not. The hardware
// decoder (A100, H100, H200) is used when nvJPEG offers it, else its default GPU backend; the
// record says which ran. Per-image failures carry the image's index, never its bytes or name (R18).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "itera/core/backend.hpp"
#include "workloads/multimodal/image_codec.hpp"

namespace itera::mm {

// Empty when nvJPEG can be loaded here, else why not.
std::string nvjpeg_unavailable_reason();

struct gpu_decode_result {
  std::size_t good = 0;
  std::vector<std::size_t> bad;              // indices into the batch
  std::vector<std::string> bad_reasons;      // parallel to bad
  std::vector<std::uint32_t> widths, heights;  // per image; 0 for a bad one
  std::vector<std::size_t> offsets;            // bytes into pixels() per image
};

class gpu_jpeg_decoder {
 public:
  // `dev` must be the cuda backend. std::runtime_error with nvjpeg_unavailable_reason() when nvJPEG
  // cannot be loaded. `max_batch`: the batch size the decoder is initialised for.
  gpu_jpeg_decoder(backend& dev, std::size_t max_batch);
  ~gpu_jpeg_decoder();
  gpu_jpeg_decoder(const gpu_jpeg_decoder&) = delete;
  gpu_jpeg_decoder& operator=(const gpu_jpeg_decoder&) = delete;

  const std::string& backend_name() const;  // "hardware" | "default"

  // Decodes JPEG files (host bytes) on the backend's stream; returns when the pixels are ready.
  // Files that are not baseline/progressive JPEGs nvJPEG accepts, or exceed `limits`, are bad.
  gpu_decode_result decode(const std::vector<std::span<const std::uint8_t>>& files, const image_limits& limits);

  const std::uint8_t* pixels() const;  // device
  rgb_image download(const gpu_decode_result& r, std::size_t index) const;

 private:
  struct impl;
  std::unique_ptr<impl> m;
};

}  // namespace itera::mm
