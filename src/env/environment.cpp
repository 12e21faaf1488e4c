// Assembles the fingerprint groups: everything `itera env` prints, the device group of a result's
// context (hardware, compared separately) and the software group (part of the recipe).
#include <algorithm>
#include <cctype>
#include <optional>
#include <sstream>

#include "itera/core/backend.hpp"
#include "itera/core/build_info.hpp"
#include "itera/core/errors.hpp"
#include "itera/env/catalogue.hpp"
#include "itera/env/fingerprint.hpp"
#include "nvml_api.hpp"

extern "C" char* openblas_get_config(void);

namespace itera {

namespace {

constexpr const char* not_found = "not found";

ojson build_facts() {
  const build_info& b = this_build();
  ojson j;
  j["version"] = b.version;
  j["git_commit"] = b.git_commit;
  j["build_type"] = b.build_type;
  j["compiler"] = b.compiler;
  j["cuda_enabled"] = b.cuda_enabled;
  j["cuda_toolkit"] = b.cuda_toolkit;
  j["cuda_architectures"] = b.cuda_architectures;
  return j;
}

// The catalogue entry for a device, from its name, memory and power limit. The board's maximum
// power limit is fixed by its design; the default and current limits are fallbacks an operator
// may have lowered, so the field used is reported.
ojson variant_for(const std::string& name, double memory_bytes, const ojson& power_source) {
  ojson v;
  if (name.empty()) {
    v["id"] = nullptr;
    v["why"] = "no device name to match";
    return v;
  }
  double power_w = 0;
  std::string power_field;
  for (const char* field : {"power_limit_max_w", "power_limit_default_w", "power_limit_w"}) {
    if (auto it = power_source.find(field); it != power_source.end() && it->is_number()) {
      power_w = it->get<double>();
      power_field = field;
      break;
    }
  }
  const double memory_gib = memory_bytes / (1024.0 * 1024.0 * 1024.0);
  try {
    std::string why;
    const catalogue_card* card = catalogue::builtin().match(name, memory_gib, power_w, &why);
    if (card == nullptr) {
      v["id"] = nullptr;
      v["why"] = why;
      return v;
    }
    v["id"] = card->id;
    v["name"] = card->name;
    v["form_factor"] = card->form_factor;
    v["matched_by"] = why;
    if (!power_field.empty()) v["power_limit_field"] = power_field;
  } catch (const input_error& e) {
    v["id"] = nullptr;
    v["why"] = e.what();
  }
  return v;
}


std::string strip_uuid(std::string u) {
  for (const char* prefix : {"GPU-", "MIG-"}) {
    if (u.rfind(prefix, 0) == 0) u.erase(0, 4);
  }
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return u;
}

struct nvml_position {
  std::size_t index = 0;
  std::string how;
};

// Which entry of nvml_fingerprint()["devices"] a cuda backend runs on: by the PCI bus id or UUID
// the backend reports when it reports one, else through the CUDA driver (nvml_api.hpp).
std::optional<nvml_position> locate(const backend& dev, const ojson& runtime, const ojson& gpu) {
  if (!gpu.value("available", false)) return std::nullopt;
  const ojson& devices = gpu["devices"];
  if (auto it = runtime.find("pci_bus_id"); it != runtime.end() && it->is_string()) {
    for (std::size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].contains("pci_bus_id") &&
          nvml::same_pci_bus_id(it->get<std::string>(), devices[i]["pci_bus_id"].get<std::string>())) {
        return nvml_position{i, "pci_bus_id"};
      }
    }
  }
  if (auto it = runtime.find("uuid"); it != runtime.end() && it->is_string()) {
    for (std::size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].contains("uuid") &&
          strip_uuid(it->get<std::string>()) == strip_uuid(devices[i]["uuid"].get<std::string>())) {
        return nvml_position{i, "uuid"};
      }
    }
  }
  if (const auto m = nvml::nvml_index_for_cuda_device(dev.device_index()); m && m->nvml_index < devices.size()) {
    return nvml_position{m->nvml_index, m->how};
  }
  return std::nullopt;
}

std::string version_of(const ojson& libraries, const char* name) {
  if (auto it = libraries.find(name); it != libraries.end()) return it->value("version", std::string(not_found));
  return not_found;
}

}  // namespace

ojson catalogue_variant(const ojson& d) {
  const std::string name = d.value("name", std::string());
  if (name.empty()) return ojson{{"id", nullptr}, {"why", "no device name to match"}};
  const double memory = d.contains("memory_total_bytes") ? d["memory_total_bytes"].get<double>() : 0.0;
  return variant_for(name, memory, d);
}

std::string blas_version() {
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... Cooperlake ...": the first two words are the
  // version; the rest names the core it detected, which is hardware, not recipe.
  const char* config = openblas_get_config();
  if (config == nullptr) return not_found;
  std::istringstream words(config);
  std::string product, version;
  words >> product >> version;
  return version.empty() ? product : product + " " + version;
}


ojson environment(backend* dev) {
  ojson out;
  out["itera"] = build_facts();
  out["host"] = host_fingerprint();
  ojson gpu = nvml_fingerprint();
  if (gpu.value("available", false)) {
    for (auto& d : gpu["devices"]) d["variant"] = catalogue_variant(d);
  }
  if (dev != nullptr && dev->name() == "cuda") {
    ojson runtime = dev->describe();
    runtime["cuda_device_index"] = dev->device_index();
    if (const auto at = locate(*dev, runtime, gpu)) {
      runtime["nvml_matched_by"] = at->how;
      gpu["devices"][at->index]["runtime"] = std::move(runtime);
    } else {
      // CUDA runs but NVML cannot say which board it is (no NVML, or no match): keep the runtime
      // facts and match the variant from the CUDA name and memory alone.
      const device_memory mem = dev->memory();
      runtime["variant"] = variant_for(dev->device_name(), static_cast<double>(mem.total_bytes), ojson::object());
      gpu["runtime"] = std::move(runtime);
    }
  }
  out["gpu"] = std::move(gpu);
  out["libraries"] = library_versions();
  return out;
}

ojson device_fingerprint(backend& dev) {
  ojson out;
  if (dev.name() != "cuda") {
    out["kind"] = std::string(dev.name());
    out["name"] = dev.name() == "cpu" ? host_fingerprint().value("cpu_model", dev.device_name()) : dev.device_name();
    return out;
  }
  out["kind"] = "cuda";
  out["cuda_device_index"] = dev.device_index();
  const ojson runtime = dev.describe();
  const ojson gpu = nvml_fingerprint();
  if (const auto at = locate(dev, runtime, gpu)) {
    const ojson& facts = gpu["devices"][at->index];
    for (const auto& [key, value] : facts.items()) out[key] = value;
    out["nvml_index"] = out["index"];
    out.erase("index");
    out["nvml_matched_by"] = at->how;
    out["driver_version"] = gpu.value("driver_version", std::string(not_found));
    out["runtime"] = runtime;
    out["variant"] = catalogue_variant(facts);
  } else {
    out["name"] = dev.device_name();
    out["nvml"] = gpu.value("available", false)
                      ? ojson{{"available", true}, {"reason", "no NVML device matches this CUDA device"}}
                      : ojson{{"available", false}, {"reason", gpu.value("reason", std::string())}};
    out["runtime"] = runtime;
    const device_memory mem = dev.memory();
    out["memory_total_bytes"] = mem.total_bytes;
    out["variant"] = variant_for(dev.device_name(), static_cast<double>(mem.total_bytes), ojson::object());
  }
  return out;
}

ojson software_fingerprint(backend& dev) {
  ojson out;
  if (dev.name() != "cuda") {
    out["openblas"] = blas_version();
    out["compiler"] = this_build().compiler;
    return out;
  }
  const ojson gpu = nvml_fingerprint();
  const ojson libraries = library_versions();
  out["driver"] = gpu.value("driver_version", std::string(not_found));
  std::string cuda_driver = gpu.value("cuda_driver_version", std::string());
  if (cuda_driver.empty()) cuda_driver = libraries["cudart"].value("driver_version", std::string(not_found));
  out["cuda_driver"] = cuda_driver;
  out["cuda_runtime"] = version_of(libraries, "cudart");
  out["cublaslt"] = version_of(libraries, "cublaslt");
  out["nccl"] = version_of(libraries, "nccl");
  out["cupti"] = version_of(libraries, "cupti");
  return out;
}

}  // namespace itera
