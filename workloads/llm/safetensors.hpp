#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data,
// offsets relative to its start. Opening a file checks the whole header against the file size, so
// a truncated or malformed file fails before any tensor is read; every error names the file.
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "workloads/llm/model.hpp"

namespace itera::llm {

struct safetensors_entry {
  std::string name;
  std::string dtype;  // as written: "BF16", "F16", "F32", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // in the data section
};

class safetensors_file {
 public:
  // input_error naming the file: unreadable, header longer than the file, JSON malformed, an entry
  // without dtype/shape/offsets, offsets that disagree with shape x dtype, data past the end.
  explicit safetensors_file(std::filesystem::path path);

  const std::filesystem::path& path() const { return m_path; }
  const std::vector<safetensors_entry>& entries() const { return m_entries; }
  const safetensors_entry* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return m_metadata; }

  // Raw bytes of one tensor into dst (end - begin bytes): for an engine that uploads them as stored.
  void read_bytes(const safetensors_entry& e, void* dst) const;
  // Values widened to fp32; BF16, F16 and F32 only (input_error naming the tensor otherwise).
  std::vector<float> read_floats(const safetensors_entry& e) const;

 private:
  std::filesystem::path m_path;
  std::uint64_t m_data_start = 0;
  std::vector<safetensors_entry> m_entries;
  std::map<std::string, std::string> m_metadata;
};

// Bytes per element of a safetensors dtype string; 0 when the format does not define it.
std::size_t safetensors_element_size(std::string_view dtype);
// "BF16", "F16", "F32"; usage_error for fp8 (it needs scales the format does not carry here).
std::string_view safetensors_dtype(dtype t);

struct safetensors_tensor_view {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<const float> values;  // encoded to the file's dtype on write (round to nearest even)
};

// Writes the tensors in the given order, the header padded with spaces to a multiple of 8 bytes.
void write_safetensors(const std::filesystem::path& path, std::span<const safetensors_tensor_view> tensors,
                       dtype file_dtype, const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace itera::llm
