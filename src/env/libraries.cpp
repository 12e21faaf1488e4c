// Versions of the CUDA libraries this process can load, found at run time with dlopen so that the
// answer is what a run would really use, not what the build saw. Every entry is present: a library
// that cannot be loaded says "not found" and why.
#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>

#include "itera/env/fingerprint.hpp"
#include "itera/env/versions.hpp"

namespace itera {

namespace {

constexpr const char* not_found = "not found";
// Where a toolkit installed without ldconfig entries keeps its libraries.
constexpr const char* toolkit_lib_dir = "/usr/local/cuda/lib64/";

struct opened {
  void* handle = nullptr;
  std::string path;    // the file the loader picked
  std::string reason;  // why nothing was opened
};

// Tries each soname on the loader's search path, then under the toolkit folder. Handles stay open
// for the life of the process: unloading CUDA libraries is never worth the risk.
opened open_first(std::initializer_list<const char*> sonames) {
  opened o;
  std::string tried;
  for (const bool toolkit_dir : {false, true}) {
    for (const char* so : sonames) {
      const std::string name = toolkit_dir ? std::string(toolkit_lib_dir) + so : std::string(so);
      dlerror();
      o.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (o.handle != nullptr) {
        link_map* map = nullptr;
        o.path = (dlinfo(o.handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
                  map->l_name[0] != '\0')
                     ? map->l_name
                     : name;
        return o;
      }
      if (!tried.empty()) tried += ", ";
      tried += name;
    }
  }
  o.reason = "cannot load any of " + tried;
  return o;
}

template <class F>
F symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(dlsym(handle, name));
}

std::string dotted(long long major, long long minor, long long patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

ojson missing(const opened& o) {
  ojson e;
  e["version"] = not_found;
  e["reason"] = o.reason;
  return e;
}

ojson missing_symbol(const opened& o, const char* name) {
  ojson e;
  e["version"] = not_found;
  e["reason"] = std::string(name) + " is not exported by " + o.path;
  e["library"] = o.path;
  return e;
}

ojson cudart_entry() {
  const opened o = open_first({"libcudart.so.13", "libcudart.so.12"});
  if (o.handle == nullptr) return missing(o);
  using version_fn = int (*)(int*);  // cudaError_t (int*); cudaSuccess == 0
  auto runtime = symbol<version_fn>(o.handle, "cudaRuntimeGetVersion");
  auto driver = symbol<version_fn>(o.handle, "cudaDriverGetVersion");
  if (runtime == nullptr) return missing_symbol(o, "cudaRuntimeGetVersion");
  ojson e;
  int v = 0;
  e["version"] = runtime(&v) == 0 ? cuda_version_string(v) : not_found;
  // The newest CUDA version the installed driver supports; 0 when no driver is installed. This
  // initialises the driver API (cuInit, about 0.2 s on an H200) but creates no context and takes
  // no device memory.
  if (driver != nullptr && driver(&v) == 0) e["driver_version"] = v > 0 ? cuda_version_string(v) : "no driver";
  e["library"] = o.path;
  return e;
}

ojson cublaslt_entry() {
  const opened o = open_first({"libcublasLt.so.13", "libcublasLt.so.12"});
  if (o.handle == nullptr) return missing(o);
  auto get = symbol<std::size_t (*)()>(o.handle, "cublasLtGetVersion");
  if (get == nullptr) return missing_symbol(o, "cublasLtGetVersion");
  ojson e;
  e["version"] = cublaslt_version_string(static_cast<long long>(get()));
  e["library"] = o.path;
  return e;
}

ojson nccl_entry() {
  const opened o = open_first({"libnccl.so.2"});
  if (o.handle == nullptr) return missing(o);
  auto get = symbol<int (*)(int*)>(o.handle, "ncclGetVersion");
  if (get == nullptr) return missing_symbol(o, "ncclGetVersion");
  int v = 0;
  if (get(&v) != 0) return missing_symbol(o, "ncclGetVersion");
  // NCCL_VERSION(X,Y,Z): X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z from 2.9 on.
  ojson e;
  e["version"] = v >= 10000 ? dotted(v / 10000, (v / 100) % 100, v % 100) : dotted(v / 1000, (v / 100) % 10, v % 100);
  e["library"] = o.path;
  return e;
}

ojson nvjpeg_entry() {
  const opened o = open_first({"libnvjpeg.so.13", "libnvjpeg.so.12"});
  if (o.handle == nullptr) {
    ojson e = missing(o);
    e["available"] = false;
    return e;
  }
  ojson e;
  e["available"] = true;
  // nvjpegStatus_t nvjpegGetProperty(libraryPropertyType, int*); MAJOR_VERSION = 0,
  // MINOR_VERSION = 1, PATCH_LEVEL = 2 (library_types.h).
  auto get = symbol<int (*)(int, int*)>(o.handle, "nvjpegGetProperty");
  int major = 0, minor = 0, patch = 0;
  if (get != nullptr && get(0, &major) == 0 && get(1, &minor) == 0 && get(2, &patch) == 0) {
    e["version"] = dotted(major, minor, patch);
  } else {
    e["version"] = "unknown";
  }
  e["library"] = o.path;
  return e;
}

ojson cupti_entry() {
  const opened o = open_first({"libcupti.so.13", "libcupti.so.12"});
  if (o.handle == nullptr) return missing(o);
  auto get = symbol<int (*)(std::uint32_t*)>(o.handle, "cuptiGetVersion");
  if (get == nullptr) return missing_symbol(o, "cuptiGetVersion");
  std::uint32_t v = 0;
  if (get(&v) != 0) return missing_symbol(o, "cuptiGetVersion");
  ojson e;
  // From CUDA 13 the CUPTI API version reads xxyyzz (toolkit major, minor, CUPTI update); before
  // it was a small counter (v28 = CUDA 12.9 Update 1), reported as such.
  e["version"] = v >= 130000 ? dotted(v / 10000, (v / 100) % 100, v % 100) : "api " + std::to_string(v);
  e["api_version"] = v;
  e["library"] = o.path;
  return e;
}

}  // namespace

ojson library_versions() {
  // Loading is done once; the answer cannot change within a process.
  static const ojson versions = [] {
    ojson v;
    v["cudart"] = cudart_entry();
    v["cublaslt"] = cublaslt_entry();
    v["nccl"] = nccl_entry();
    v["nvjpeg"] = nvjpeg_entry();
    v["cupti"] = cupti_entry();
    return v;
  }();
  return versions;
}

}  // namespace itera
