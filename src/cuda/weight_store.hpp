#pragma once
// Where a component's weights wait while it is not on the device (R11: the multimodal pipeline's
// residency=staged): page-locked host memory, or a file on disk read back through page-locked
// bounce buffers. A store holds one contiguous block, an engine's weight arena, and writes it back
// to the same device address after the engine has restored its memory. No CUDA types here.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "itera/core/backend.hpp"

namespace itera::cuda {

enum class store_kind { pinned, disk };
std::string_view store_kind_name(store_kind k);  // "pinned" | "disk"

struct store_load {
  std::uint64_t bytes = 0;
  // disk: the share of the file's pages still in the page cache when the read began, after the
  // store asked the kernel to drop them (mincore); the rest came from the disk. -1 for pinned.
  double cached_fraction = -1;
};

class weight_store {
 public:
  // Copies the `bytes` at device address `src` into the store, after waiting for the backend's
  // stream: into page-locked host memory (out_of_memory when it cannot be pinned), or into `file`
  // (created or truncated, written through a bounce buffer and flushed to the disk; std::runtime_error
  // naming the file and the system's reason when it cannot). `dev` must be the cuda backend.
  weight_store(backend& dev, store_kind kind, const void* src, std::uint64_t bytes, std::filesystem::path file = {});
  ~weight_store();  // removes the file
  weight_store(const weight_store&) = delete;
  weight_store& operator=(const weight_store&) = delete;

  // Copies the block to device address `dst` and waits. From disk: asks the kernel to drop the
  // file's cached pages (posix_fadvise DONTNEED), measures what stayed cached, then reads 64 MiB
  // chunks into two page-locked buffers in turn, each chunk's copy to the device overlapping the
  // next read.
  store_load load(void* dst);

  store_kind kind() const;
  std::uint64_t bytes() const;
  const std::filesystem::path& file() const;

 private:
  struct impl;
  std::unique_ptr<impl> m;
};

}  // namespace itera::cuda
