// nvJPEG through dlopen (decode_gpu.hpp). The few declarations below follow the nvJPEG API
// reference (CUDA 12/13): handles are opaque pointers, statuses and enums are ints with the
// documented values, nvjpegImage_t holds four channel pointers and four size_t pitches.
#include "workloads/multimodal/decode_gpu.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "itera/cuda/check.hpp"
#include "itera/cuda/cuda_backend.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/memory.hpp"

namespace itera::mm {

namespace {

using nvjpeg_handle = void*;
using nvjpeg_state = void*;
constexpr int nvjpeg_max_component = 4;
constexpr int nvjpeg_status_success = 0;
constexpr int nvjpeg_backend_default = 0;
constexpr int nvjpeg_backend_hardware = 3;
constexpr int nvjpeg_output_rgbi = 5;

struct nvjpeg_image {
  unsigned char* channel[nvjpeg_max_component];
  std::size_t pitch[nvjpeg_max_component];
};

struct nvjpeg_api {
  int (*create_simple)(nvjpeg_handle*) = nullptr;
  int (*create_ex)(int, void*, void*, unsigned, nvjpeg_handle*) = nullptr;
  int (*destroy)(nvjpeg_handle) = nullptr;
  int (*state_create)(nvjpeg_handle, nvjpeg_state*) = nullptr;
  int (*state_destroy)(nvjpeg_state) = nullptr;
  int (*get_image_info)(nvjpeg_handle, const unsigned char*, std::size_t, int*, int*, int*, int*) = nullptr;
  int (*batched_initialize)(nvjpeg_handle, nvjpeg_state, int, int, int) = nullptr;
  int (*decode_batched)(nvjpeg_handle, nvjpeg_state, const unsigned char* const*, const std::size_t*, nvjpeg_image*,
                        cudaStream_t) = nullptr;
  int (*decode)(nvjpeg_handle, nvjpeg_state, const unsigned char*, std::size_t, int, nvjpeg_image*, cudaStream_t) = nullptr;
  std::string library;
  std::string why_not;
};

const nvjpeg_api& api() {
  static nvjpeg_api a;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = nullptr;
    for (const char* name : {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib) {
        a.library = name;
        break;
      }
    }
    if (!lib) {
      a.why_not = "nvJPEG is not installed here (no libnvjpeg.so.13 or .12 on the library path; it ships with the "
                  "CUDA toolkit, not with the driver)";
      return;
    }
    const auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && a.why_not.empty()) a.why_not = fmt::format("{} has no {}", a.library, name);
    };
    sym(a.create_simple, "nvjpegCreateSimple");
    sym(a.create_ex, "nvjpegCreateEx");
    sym(a.destroy, "nvjpegDestroy");
    sym(a.state_create, "nvjpegJpegStateCreate");
    sym(a.state_destroy, "nvjpegJpegStateDestroy");
    sym(a.get_image_info, "nvjpegGetImageInfo");
    sym(a.batched_initialize, "nvjpegDecodeBatchedInitialize");
    sym(a.decode_batched, "nvjpegDecodeBatched");
    sym(a.decode, "nvjpegDecode");
  });
  return a;
}

void check(int status, const char* what) {
  if (status != nvjpeg_status_success) throw std::runtime_error(fmt::format("nvJPEG {} failed (status {})", what, status));
}

}  // namespace

std::string nvjpeg_unavailable_reason() { return api().why_not; }

struct gpu_jpeg_decoder::impl {
  cuda::cuda_backend* dev = nullptr;
  nvjpeg_handle handle = nullptr;
  nvjpeg_state state = nullptr;
  std::string backend = "default";
  std::size_t max_batch = 0;
  cuda::device_buffer pixels;
};

gpu_jpeg_decoder::gpu_jpeg_decoder(backend& dev, std::size_t max_batch) : m(std::make_unique<impl>()) {
  const auto& a = api();
  if (!a.why_not.empty()) throw std::runtime_error(a.why_not);
  if (max_batch == 0) throw std::invalid_argument("gpu jpeg decoder: max_batch must be at least 1");
  m->dev = &cuda::as_cuda(dev);
  m->dev->make_current();
  m->max_batch = max_batch;
  if (a.create_ex(nvjpeg_backend_hardware, nullptr, nullptr, 0, &m->handle) == nvjpeg_status_success) {
    m->backend = "hardware";
  } else {
    m->handle = nullptr;
    check(a.create_ex(nvjpeg_backend_default, nullptr, nullptr, 0, &m->handle), "nvjpegCreateEx(default)");
  }
  check(a.state_create(m->handle, &m->state), "nvjpegJpegStateCreate");
}

gpu_jpeg_decoder::~gpu_jpeg_decoder() {
  const auto& a = api();
  if (m->state) (void)a.state_destroy(m->state);
  if (m->handle) (void)a.destroy(m->handle);
}

const std::string& gpu_jpeg_decoder::backend_name() const { return m->backend; }
const std::uint8_t* gpu_jpeg_decoder::pixels() const { return static_cast<const std::uint8_t*>(m->pixels.data()); }

gpu_decode_result gpu_jpeg_decoder::decode(const std::vector<std::span<const std::uint8_t>>& files,
                                           const image_limits& limits) {
  const auto& a = api();
  if (files.size() > m->max_batch)
    throw std::invalid_argument(fmt::format("gpu jpeg decoder: {} files in a batch of at most {}", files.size(), m->max_batch));
  m->dev->make_current();
  gpu_decode_result r;
  r.widths.assign(files.size(), 0);
  r.heights.assign(files.size(), 0);
  r.offsets.assign(files.size(), 0);
  std::vector<std::size_t> ok;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto bad = [&](std::string why) {
      r.bad.push_back(i);
      r.bad_reasons.push_back(std::move(why));
    };
    if (files[i].empty()) {
      bad("empty file");
      continue;
    }
    if (sniff_format(files[i]) != image_format::jpeg) {
      bad("not a JPEG (the GPU decoder takes JPEG; other formats decode on the CPU)");
      continue;
    }
    int components = 0, subsampling = 0, w[nvjpeg_max_component] = {}, h[nvjpeg_max_component] = {};
    if (a.get_image_info(m->handle, files[i].data(), files[i].size(), &components, &subsampling, w, h) !=
            nvjpeg_status_success ||
        w[0] <= 0 || h[0] <= 0) {
      bad("nvJPEG cannot read the JPEG header (corrupt or unsupported)");
      continue;
    }
    if (static_cast<std::uint32_t>(w[0]) > limits.max_side || static_cast<std::uint32_t>(h[0]) > limits.max_side ||
        std::uint64_t(w[0]) * std::uint64_t(h[0]) > limits.max_pixels) {
      bad(fmt::format("{}x{} is over the limits ({} per side, {} pixels)", w[0], h[0], limits.max_side, limits.max_pixels));
      continue;
    }
    r.widths[i] = static_cast<std::uint32_t>(w[0]);
    r.heights[i] = static_cast<std::uint32_t>(h[0]);
    r.offsets[i] = bytes;
    bytes += 3ull * static_cast<std::size_t>(w[0]) * static_cast<std::size_t>(h[0]);
    ok.push_back(i);
  }
  if (ok.empty()) return r;
  if (m->pixels.bytes() < bytes) m->pixels = m->dev->allocate(bytes);
  auto* base = static_cast<unsigned char*>(m->pixels.data());
  const auto dest = [&](std::size_t i) {
    nvjpeg_image img{};
    img.channel[0] = base + r.offsets[i];
    img.pitch[0] = 3ull * r.widths[i];
    return img;
  };
  std::vector<const unsigned char*> data;
  std::vector<std::size_t> lengths;
  std::vector<nvjpeg_image> out;
  for (std::size_t i : ok) {
    data.push_back(files[i].data());
    lengths.push_back(files[i].size());
    out.push_back(dest(i));
  }
  cudaStream_t st = m->dev->stream();
  bool batched = a.batched_initialize(m->handle, m->state, static_cast<int>(ok.size()), 1, nvjpeg_output_rgbi) ==
                 nvjpeg_status_success;
  if (batched)
    batched = a.decode_batched(m->handle, m->state, data.data(), lengths.data(), out.data(), st) == nvjpeg_status_success;
  if (!batched) {
    // One bad stream fails the whole batch: decode one by one to find it.
    std::vector<std::size_t> still;
    for (std::size_t k = 0; k < ok.size(); ++k) {
      nvjpeg_image img = out[k];
      if (a.decode(m->handle, m->state, data[k], lengths[k], nvjpeg_output_rgbi, &img, st) == nvjpeg_status_success) {
        still.push_back(ok[k]);
      } else {
        r.bad.push_back(ok[k]);
        r.bad_reasons.push_back("nvJPEG could not decode it (corrupt, truncated or an unsupported coding)");
        r.widths[ok[k]] = r.heights[ok[k]] = 0;
      }
    }
    ok = std::move(still);
  }
  ITERA_CUDA_CHECK(cudaStreamSynchronize(st));
  r.good = ok.size();
  return r;
}

rgb_image gpu_jpeg_decoder::download(const gpu_decode_result& r, std::size_t index) const {
  rgb_image img;
  if (index >= r.widths.size() || r.widths[index] == 0) throw std::invalid_argument("gpu jpeg decoder: no such good image");
  img.width = r.widths[index];
  img.height = r.heights[index];
  img.pixels.resize(3ull * img.width * img.height);
  ITERA_CUDA_CHECK(cudaMemcpy(img.pixels.data(), pixels() + r.offsets[index], img.pixels.size(), cudaMemcpyDeviceToHost));
  return img;
}

}  // namespace itera::mm
