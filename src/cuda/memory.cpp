#include "src/cuda/memory.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include <unistd.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "itera/cuda/check.hpp"

namespace itera::cuda {

std::string format_gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// ---------------------------------------------------------------------------------------------
// device_buffer

device_buffer::device_buffer(std::size_t bytes, memory_tracker* tracker) : m_bytes(bytes), m_tracker(tracker) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&m_data, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so the next launch check does not see it
    m_data = nullptr;
    throw out_of_memory("cudaMalloc of " + format_gib(bytes) + " failed: out of device memory");
  }
  ITERA_CUDA_CHECK(status);
  if (m_tracker) m_tracker->on_alloc(m_bytes);
}

namespace {

// The driver's virtual memory management, reached through the runtime (cudaGetDriverEntryPoint-
// ByVersion): no link against libcuda, so binaries still start where no driver is installed.
struct vmm_api {
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 free_range = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuGetErrorName_v6000 error_name = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  std::string missing;  // the first entry point not found
};

const vmm_api& vmm() {
  static const vmm_api api = [] {
    vmm_api a;
    const auto get = [&a](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess || p == nullptr) {
        (void)cudaGetLastError();
        if (a.missing.empty()) a.missing = name;
        return;
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    get("cuMemAddressReserve", a.reserve);
    get("cuMemAddressFree", a.free_range);
    get("cuMemCreate", a.create);
    get("cuMemRelease", a.release);
    get("cuMemMap", a.map);
    get("cuMemUnmap", a.unmap);
    get("cuMemSetAccess", a.set_access);
    get("cuMemGetAllocationGranularity", a.granularity);
    get("cuGetErrorName", a.error_name);
    get("cuDeviceGet", a.device_get);
    get("cuDeviceGetAttribute", a.attribute);
    return a;
  }();
  return api;
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

void check_driver(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (vmm().error_name == nullptr || vmm().error_name(r, &name) != CUDA_SUCCESS || name == nullptr) name = "CUDA_ERROR_?";
  throw std::runtime_error(std::string("CUDA driver error ") + name + " in " + what);
}

}  // namespace

std::string evictable_unavailable_reason(int device) {
  const vmm_api& a = vmm();
  if (!a.missing.empty()) return "the CUDA driver has no " + a.missing + " (virtual memory management)";
  CUdevice dev = 0;
  check_driver(a.device_get(&dev, device), "cuDeviceGet");
  int supported = 0;
  check_driver(a.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
               "cuDeviceGetAttribute");
  if (!supported) return "device " + std::to_string(device) + " does not support CUDA virtual memory management";
  return {};
}

device_buffer::device_buffer(std::size_t bytes, memory_tracker* tracker, evictable_t)
    : m_bytes(bytes), m_tracker(tracker) {
  if (bytes == 0) return;
  ITERA_CUDA_CHECK(cudaGetDevice(&m_device));
  if (const std::string why = evictable_unavailable_reason(m_device); !why.empty())
    throw std::runtime_error("evictable device memory: " + why);
  const CUmemAllocationProp prop = device_prop(m_device);
  std::size_t grain = 0;
  check_driver(vmm().granularity(&grain, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity");
  const std::size_t reserved = (bytes + grain - 1) / grain * grain;
  CUdeviceptr base = 0;
  check_driver(vmm().reserve(&base, reserved, 0, 0, 0), "cuMemAddressReserve");
  m_data = reinterpret_cast<void*>(base);
  m_reserved = reserved;
  try {
    map();
  } catch (...) {
    (void)vmm().free_range(base, reserved);
    m_data = nullptr;
    m_reserved = 0;
    throw;
  }
}

void device_buffer::map() {
  const CUmemAllocationProp prop = device_prop(m_device);
  CUmemGenericAllocationHandle handle = 0;
  const CUresult made = vmm().create(&handle, m_reserved, &prop, 0);
  if (made == CUDA_ERROR_OUT_OF_MEMORY)
    throw out_of_memory("cuMemCreate of " + format_gib(m_reserved) + " failed: out of device memory");
  check_driver(made, "cuMemCreate");
  const auto base = reinterpret_cast<CUdeviceptr>(m_data);
  CUresult r = vmm().map(base, m_reserved, 0, handle, 0);
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = vmm().set_access(base, m_reserved, &access, 1);
    if (r != CUDA_SUCCESS) (void)vmm().unmap(base, m_reserved);
  }
  if (r != CUDA_SUCCESS) {
    (void)vmm().release(handle);
    check_driver(r, "cuMemMap / cuMemSetAccess");
  }
  m_handle = handle;
  if (m_tracker) m_tracker->on_alloc(m_bytes);
}

void device_buffer::evict() {
  if (!is_evictable()) throw std::logic_error("device_buffer::evict: not an evictable buffer");
  if (m_handle == 0) return;
  check_driver(vmm().unmap(reinterpret_cast<CUdeviceptr>(m_data), m_reserved), "cuMemUnmap");
  check_driver(vmm().release(m_handle), "cuMemRelease");
  m_handle = 0;
  if (m_tracker) m_tracker->on_free(m_bytes);
}

void device_buffer::restore() {
  if (!is_evictable()) throw std::logic_error("device_buffer::restore: not an evictable buffer");
  if (m_handle != 0) return;
  map();
}

device_buffer::~device_buffer() { release(); }

void device_buffer::release() noexcept {
  if (!m_data) return;
  // A destructor cannot throw; a failing free here means the context is already broken and the
  // error has been (or will be) reported by the call that broke it.
  if (is_evictable()) {
    const auto base = reinterpret_cast<CUdeviceptr>(m_data);
    // Unmapping does not wait for work still using the memory (cudaFree does): wait for the
    // device first, so that a buffer dropped on an error path is not pulled from under a kernel.
    (void)cudaDeviceSynchronize();
    if (m_handle != 0) {
      (void)vmm().unmap(base, m_reserved);
      (void)vmm().release(m_handle);
      if (m_tracker) m_tracker->on_free(m_bytes);
    }
    (void)vmm().free_range(base, m_reserved);
  } else {
    (void)cudaFree(m_data);
    if (m_tracker) m_tracker->on_free(m_bytes);
  }
  m_data = nullptr;
  m_reserved = 0;
  m_handle = 0;
}

device_buffer::device_buffer(device_buffer&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)),
      m_bytes(std::exchange(other.m_bytes, 0)),
      m_tracker(std::exchange(other.m_tracker, nullptr)),
      m_reserved(std::exchange(other.m_reserved, 0)),
      m_device(other.m_device),
      m_handle(std::exchange(other.m_handle, 0)) {}

device_buffer& device_buffer::operator=(device_buffer&& other) noexcept {
  if (this != &other) {
    release();
    m_data = std::exchange(other.m_data, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
    m_tracker = std::exchange(other.m_tracker, nullptr);
    m_reserved = std::exchange(other.m_reserved, 0);
    m_device = other.m_device;
    m_handle = std::exchange(other.m_handle, 0);
  }
  return *this;
}

// ---------------------------------------------------------------------------------------------
// pinned_buffer

pinned_buffer::pinned_buffer(std::size_t bytes) : m_bytes(bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaHostAlloc(&m_data, bytes, cudaHostAllocDefault);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    m_data = nullptr;
    throw out_of_memory("cudaHostAlloc of " + format_gib(bytes) + " failed: cannot pin that much host memory");
  }
  ITERA_CUDA_CHECK(status);
}

pinned_buffer::~pinned_buffer() { release(); }

void pinned_buffer::release() noexcept {
  if (!m_data) return;
  (void)cudaFreeHost(m_data);
  m_data = nullptr;
}

pinned_buffer::pinned_buffer(pinned_buffer&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)), m_bytes(std::exchange(other.m_bytes, 0)) {}

pinned_buffer& pinned_buffer::operator=(pinned_buffer&& other) noexcept {
  if (this != &other) {
    release();
    m_data = std::exchange(other.m_data, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
  }
  return *this;
}

// ---------------------------------------------------------------------------------------------
// pageable_buffer

pageable_buffer::pageable_buffer(std::size_t bytes) : m_bytes(bytes) {
  if (bytes == 0) return;
  const long page_size = sysconf(_SC_PAGESIZE);
  const std::size_t page = page_size > 0 ? static_cast<std::size_t>(page_size) : 4096;
  const std::size_t rounded = (bytes + page - 1) / page * page;
  m_data = std::aligned_alloc(page, rounded);
  if (!m_data) throw out_of_memory("allocation of " + format_gib(bytes) + " of pageable host memory failed");
  // First touch: one write per page maps every page now, outside any timed copy.
  auto* bytes_ptr = static_cast<unsigned char*>(m_data);
  for (std::size_t offset = 0; offset < rounded; offset += page) bytes_ptr[offset] = 0;
}

pageable_buffer::~pageable_buffer() { std::free(m_data); }

pageable_buffer::pageable_buffer(pageable_buffer&& other) noexcept
    : m_data(std::exchange(other.m_data, nullptr)), m_bytes(std::exchange(other.m_bytes, 0)) {}

pageable_buffer& pageable_buffer::operator=(pageable_buffer&& other) noexcept {
  if (this != &other) {
    std::free(m_data);
    m_data = std::exchange(other.m_data, nullptr);
    m_bytes = std::exchange(other.m_bytes, 0);
  }
  return *this;
}

}  // namespace itera::cuda
