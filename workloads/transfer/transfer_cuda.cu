// transfer on the cuda backend: one cudaMemcpyAsync on the backend's stream per repetition, between
// device memory and pinned (cudaHostAlloc) or pageable (plain, first-touched) host memory, or
// between two device buffers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "itera/core/errors.hpp"
#include "itera/core/runner.hpp"
#include "itera/cuda/check.hpp"
#include "itera/env/fingerprint.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/text.hpp"
#include "workloads/transfer/transfer.hpp"

namespace itera::transfer {
namespace {

using cuda::cat;
using cuda::cuda_backend;
using cuda::device_buffer;
using cuda::format_gib;
using cuda::pageable_buffer;
using cuda::pinned_buffer;

// Source contents: varied (an offset error shows), never zero (the poisoned destination is zero).
__host__ __device__ inline std::uint64_t pattern_word(std::uint64_t i) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  return (z ^ (z >> 29)) | 0x0101010101010101ull;  // every byte odd, so none is zero
}

__global__ void fill_pattern_kernel(std::uint8_t* out, std::uint64_t bytes) {
  const std::uint64_t words = bytes / 8;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  const std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  auto* out_words = reinterpret_cast<std::uint64_t*>(out);  // cudaMalloc: 256-byte aligned
  for (std::uint64_t w = first; w < words; w += stride) out_words[w] = pattern_word(w);
  if (first == 0)
    for (std::uint64_t b = words * 8; b < bytes; ++b)
      out[b] = static_cast<std::uint8_t>(pattern_word(words) >> (8 * (b - words * 8)));
}

void fill_pattern_host(void* data, std::uint64_t bytes) {
  auto* out = static_cast<std::uint8_t*>(data);
  const std::uint64_t words = bytes / 8;
  for (std::uint64_t w = 0; w < words; ++w) {
    const std::uint64_t v = pattern_word(w);
    std::memcpy(out + 8 * w, &v, 8);
  }
  for (std::uint64_t b = words * 8; b < bytes; ++b)
    out[b] = static_cast<std::uint8_t>(pattern_word(words) >> (8 * (b - words * 8)));
}

void fill_pattern_device(const device_buffer& buf, cudaStream_t stream, int multiprocessors) {
  const std::uint64_t words = buf.bytes() / 8;
  const std::uint64_t blocks = std::clamp<std::uint64_t>((words + 255) / 256, 1,
                                                         static_cast<std::uint64_t>(std::max(multiprocessors, 1)) * 32);
  fill_pattern_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(buf.as<std::uint8_t>(), buf.bytes());
  ITERA_CUDA_CHECK_LAUNCH();
}

// Host memory the kernel would give a new allocation now (MemAvailable), when /proc says.
std::optional<std::uint64_t> host_memory_available() {
  const ojson host = host_fingerprint();
  if (!host.contains("memory_available_bytes")) return std::nullopt;
  return host.at("memory_available_bytes").get<std::uint64_t>();
}

// The PCIe link's theoretical rate per direction for this device, from NVML's maximum generation
// and width (the current ones drop while the link idles), as the device fingerprint matched them.
// Nothing when NVML or the match is missing.
std::optional<double> pcie_theoretical_bytes_per_s(backend& dev) {
  const ojson d = device_fingerprint(dev);
  const double rate = pcie_bytes_per_s(d.value("pcie_gen_max", 0), d.value("pcie_width_max", 0));
  if (rate > 0) return rate;
  return std::nullopt;
}

// One side of a copy: device memory, or host memory of either kind.
class endpoint {
 public:
  static endpoint device(cuda_backend& dev, std::uint64_t bytes) { return endpoint(dev.allocate(bytes)); }
  static endpoint host(bool pinned, std::uint64_t bytes) {
    if (pinned) return endpoint(pinned_buffer(bytes));
    return endpoint(pageable_buffer(bytes));
  }
  void* data() const {
    return std::visit([](const auto& b) { return b.data(); }, m_buffer);
  }
  bool on_device() const { return std::holds_alternative<device_buffer>(m_buffer); }
  const device_buffer& device_memory() const { return std::get<device_buffer>(m_buffer); }

  // Bytes [offset, offset + count) into `out`, wherever they live.
  void read(std::uint64_t offset, std::uint64_t count, std::uint8_t* out, cudaStream_t stream) const {
    const auto* src = static_cast<const std::uint8_t*>(data()) + offset;
    if (!on_device()) {
      std::memcpy(out, src, count);
      return;
    }
    ITERA_CUDA_CHECK(cudaMemcpyAsync(out, src, count, cudaMemcpyDeviceToHost, stream));
    ITERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  void poison(cudaStream_t stream) const {
    const std::uint64_t bytes = std::visit([](const auto& b) { return static_cast<std::uint64_t>(b.bytes()); }, m_buffer);
    if (on_device())
      ITERA_CUDA_CHECK(cudaMemsetAsync(data(), 0, bytes, stream));
    else
      std::memset(data(), 0, bytes);
  }

 private:
  using storage = std::variant<device_buffer, pinned_buffer, pageable_buffer>;
  explicit endpoint(storage s) : m_buffer(std::move(s)) {}
  storage m_buffer;
};

constexpr std::uint64_t device_memory_margin = std::uint64_t{64} << 20;
constexpr std::uint64_t check_chunk_bytes = 4096;
constexpr std::uint64_t check_chunks = 64;

}  // namespace

void run_cuda(case_state& state) {
  cuda_backend& dev = cuda::as_cuda(state.device());
  dev.make_current();
  const std::string& direction = state.get_string("direction");
  const std::string& memory = state.get_string("memory");
  const auto bytes = static_cast<std::uint64_t>(state.get_int("bytes"));
  const bool d2d = direction == "d2d";
  const bool h2d = direction == "h2d";
  if (!d2d && memory != "pinned" && memory != "pageable")
    state.skip(cat("direction=", direction, " copies between host and device: use memory=pinned or memory=pageable"));
  const bool pinned = memory == "pinned";

  // Fit, before allocating anything.
  const std::uint64_t device_bytes = d2d ? 2 * bytes : bytes;
  const device_memory mem = dev.memory();
  if (device_bytes + device_memory_margin > mem.free_bytes)
    state.skip(cat("does not fit: needs ", format_gib(device_bytes), " of device memory, ", format_gib(mem.free_bytes),
                   " free on ", dev.device_name()));
  if (!d2d) {
    if (const auto available = host_memory_available(); available && bytes > *available)
      state.skip(cat("does not fit: needs ", format_gib(bytes), " of host memory, ", format_gib(*available),
                     " available"));
  }

  const cudaStream_t stream = dev.stream();
  const int sms = dev.properties().multiProcessorCount;
  std::optional<endpoint> src, dst;
  try {
    if (d2d) {
      src = endpoint::device(dev, bytes);
      dst = endpoint::device(dev, bytes);
    } else if (h2d) {
      src = endpoint::host(pinned, bytes);
      dst = endpoint::device(dev, bytes);
    } else {
      src = endpoint::device(dev, bytes);
      dst = endpoint::host(pinned, bytes);
    }
  } catch (const cuda::out_of_memory& e) {
    state.skip(cat("does not fit: ", e.what()));
  }
  if (src->on_device())
    fill_pattern_device(src->device_memory(), stream, sms);
  else
    fill_pattern_host(src->data(), bytes);
  ITERA_CUDA_CHECK(cudaStreamSynchronize(stream));

  const cudaMemcpyKind kind = d2d ? cudaMemcpyDeviceToDevice : h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  void* const to = dst->data();
  const void* const from = src->data();

  state.set_field("copy_engine", "cudaMemcpyAsync");
  if (!d2d && !pinned)
    state.use_timer(cuda::as_cuda(state.device())
                        .make_event_timer("cuda_events (pageable copies stage through host memory, outside CUPTI's "
                                          "copy records)"));

  if (state.options().verify) {
    dst->poison(stream);
    ITERA_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, kind, stream));
    ITERA_CUDA_CHECK(cudaStreamSynchronize(stream));
    // The whole buffer when it is small, else 64 chunks of 4 KiB spread from the first byte to the last.
    const std::uint64_t chunk = std::min(bytes, check_chunk_bytes);
    const std::uint64_t chunks = bytes <= check_chunk_bytes * check_chunks ? (bytes + chunk - 1) / chunk : check_chunks;
    std::vector<std::uint8_t> expected(chunk), got(chunk);
    std::uint64_t compared = 0, differing = 0;
    for (std::uint64_t c = 0; c < chunks; ++c) {
      const std::uint64_t offset =
          bytes <= check_chunk_bytes * check_chunks ? c * chunk : (bytes - chunk) * c / (chunks - 1);
      const std::uint64_t count = std::min(chunk, bytes - offset);
      src->read(offset, count, expected.data(), stream);
      dst->read(offset, count, got.data(), stream);
      for (std::uint64_t i = 0; i < count; ++i) differing += expected[i] != got[i];
      compared += count;
    }
    const double error = compared ? static_cast<double>(differing) / static_cast<double>(compared) : 1.0;
    const bool passed = compared > 0 && differing == 0;
    state.set_verification(passed, error, 0.0, cat("byte comparison of ", compared, " sampled bytes in ", chunks, " chunks"));
    if (!passed)
      throw std::runtime_error(cat("transfer ", direction, " verification failed: ", differing, " of ", compared,
                                   " sampled bytes differ"));
  }

  if (!d2d)
    if (const auto link = pcie_theoretical_bytes_per_s(dev)) state.add_metric("link/theoretical", *link, "B/s");

  // Bandwidth counts read + write for d2d (as the copy ceiling does) and the bytes moved once otherwise.
  if (d2d)
    state.set_work(0, static_cast<double>(bytes), static_cast<double>(bytes));
  else
    state.set_work(0, static_cast<double>(bytes), 0);
  state.set_ceiling_key(d2d ? std::string("copy.d2d") : cat("copy.", direction, ".", memory));
  state.exec([&] { ITERA_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, kind, stream)); });
}

}  // namespace itera::transfer
