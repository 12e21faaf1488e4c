#include "workloads/llm/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"
#include "workloads/gemm/numeric.hpp"

namespace itera::llm {
namespace {

namespace fs = std::filesystem;

// The reference implementation refuses headers above 100 MB; a larger length means a foreign file.
constexpr std::uint64_t max_header_bytes = 100'000'000;

std::uint64_t read_u64_le(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

[[noreturn]] void fail(const fs::path& path, const std::string& what) {
  throw input_error(fmt::format("{}: {}", path.string(), what));
}

std::vector<std::int64_t> parse_shape(const fs::path& path, const std::string& name, const nlohmann::json& j) {
  if (!j.is_array()) fail(path, fmt::format("tensor '{}': \"shape\" is not an array", name));
  std::vector<std::int64_t> shape;
  for (const auto& d : j) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > (std::uint64_t{1} << 40))
      fail(path, fmt::format("tensor '{}': shape entry {} is not a dimension", name, d.dump()));
    shape.push_back(d.get<std::int64_t>());
  }
  return shape;
}

}  // namespace

std::size_t safetensors_element_size(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

std::string_view safetensors_dtype(dtype t) {
  switch (t) {
    case dtype::fp32: return "F32";
    case dtype::fp16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::fp8_e4m3: break;
  }
  throw usage_error("safetensors: writing fp8_e4m3 needs per-channel scales; write bf16, fp16 or fp32");
}

safetensors_file::safetensors_file(fs::path path) : m_path(std::move(path)) {
  std::error_code ec;
  const std::uint64_t file_size = fs::file_size(m_path, ec);
  if (ec) fail(m_path, fmt::format("cannot read: {}", ec.message()));
  std::ifstream in(m_path, std::ios::binary);
  if (!in) fail(m_path, "cannot open for reading");
  if (file_size < 8) fail(m_path, fmt::format("truncated: {} bytes, shorter than the 8-byte header length", file_size));
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  const std::uint64_t header_bytes = read_u64_le(length_bytes);
  if (header_bytes > file_size - 8)
    fail(m_path, fmt::format("truncated or not safetensors: header length {} runs past the end of the file ({} bytes)",
                             header_bytes, file_size));
  if (header_bytes > max_header_bytes)
    fail(m_path, fmt::format("not safetensors: header length {} exceeds {} bytes", header_bytes, max_header_bytes));
  std::string text(static_cast<std::size_t>(header_bytes), '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_bytes));
  if (!in) fail(m_path, "truncated while reading the header");
  m_data_start = 8 + header_bytes;
  const std::uint64_t data_bytes = file_size - m_data_start;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(m_path, fmt::format("malformed header (not JSON): {}", e.what()));
  }
  if (!header.is_object()) fail(m_path, "malformed header: not a JSON object");

  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(m_path, "malformed header: \"__metadata__\" is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail(m_path, fmt::format("malformed header: metadata '{}' is not a string", k));
        m_metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) fail(m_path, fmt::format("malformed header: tensor '{}' is not an object", name));
    if (!value.contains("dtype") || !value["dtype"].is_string())
      fail(m_path, fmt::format("malformed header: tensor '{}' has no \"dtype\" string", name));
    if (!value.contains("shape")) fail(m_path, fmt::format("malformed header: tensor '{}' has no \"shape\"", name));
    if (!value.contains("data_offsets") || !value["data_offsets"].is_array() || value["data_offsets"].size() != 2 ||
        !value["data_offsets"][0].is_number_unsigned() || !value["data_offsets"][1].is_number_unsigned())
      fail(m_path, fmt::format("malformed header: tensor '{}' needs \"data_offsets\": [begin, end]", name));
    safetensors_entry e;
    e.name = name;
    e.dtype = value["dtype"].get<std::string>();
    e.shape = parse_shape(m_path, name, value["shape"]);
    e.begin = value["data_offsets"][0].get<std::uint64_t>();
    e.end = value["data_offsets"][1].get<std::uint64_t>();
    const std::size_t element = safetensors_element_size(e.dtype);
    if (element == 0) fail(m_path, fmt::format("malformed header: tensor '{}' has unknown dtype '{}'", name, e.dtype));
    if (e.end < e.begin)
      fail(m_path, fmt::format("malformed header: tensor '{}' has data_offsets [{}, {}] ending before they begin", name,
                               e.begin, e.end));
    // Dimensions are capped at 2^40 above; the product is checked in double to avoid overflow.
    double elements = 1;
    for (const auto d : e.shape) elements *= static_cast<double>(d);
    const double expected = elements * static_cast<double>(element);
    if (expected != static_cast<double>(e.end - e.begin))
      fail(m_path, fmt::format("malformed header: tensor '{}' of shape [{}] and dtype {} needs {:.0f} bytes, its "
                               "data_offsets [{}, {}] hold {}",
                               name, fmt::join(e.shape, ", "), e.dtype, expected, e.begin, e.end, e.end - e.begin));
    if (e.end > data_bytes)
      fail(m_path, fmt::format("truncated: tensor '{}' ends at byte {} of the data section, which holds {} bytes", name,
                               e.end, data_bytes));
    m_entries.push_back(std::move(e));
  }
  std::sort(m_entries.begin(), m_entries.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
}

const safetensors_entry* safetensors_file::find(std::string_view name) const {
  for (const auto& e : m_entries)
    if (e.name == name) return &e;
  return nullptr;
}

void safetensors_file::read_bytes(const safetensors_entry& e, void* dst) const {
  std::ifstream in(m_path, std::ios::binary);
  if (!in) fail(m_path, "cannot open for reading");
  in.seekg(static_cast<std::streamoff>(m_data_start + e.begin));
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(e.end - e.begin));
  if (!in || static_cast<std::uint64_t>(in.gcount()) != e.end - e.begin)
    fail(m_path, fmt::format("truncated while reading tensor '{}' (the file changed after it was opened?)", e.name));
}

std::vector<float> safetensors_file::read_floats(const safetensors_entry& e) const {
  const std::size_t element = safetensors_element_size(e.dtype);
  if (e.dtype != "BF16" && e.dtype != "F16" && e.dtype != "F32")
    fail(m_path, fmt::format("tensor '{}' has dtype {}; the loader reads BF16, F16 or F32", e.name, e.dtype));
  const std::size_t count = static_cast<std::size_t>((e.end - e.begin) / element);
  std::vector<unsigned char> raw(static_cast<std::size_t>(e.end - e.begin));
  read_bytes(e, raw.data());
  std::vector<float> out(count);
  // safetensors is little-endian, as every host this runs on.
  if (e.dtype == "F32") {
    std::memcpy(out.data(), raw.data(), raw.size());
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      const auto bits = static_cast<std::uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
      out[i] = e.dtype == "BF16" ? gemm::numeric::bf16_to_float(bits) : gemm::numeric::fp16_to_float(bits);
    }
  }
  return out;
}

void write_safetensors(const fs::path& path, std::span<const safetensors_tensor_view> tensors, dtype file_dtype,
                       const std::map<std::string, std::string>& metadata) {
  const std::string_view type = safetensors_dtype(file_dtype);
  const std::size_t element = safetensors_element_size(type);
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    std::int64_t elements = 1;
    for (const auto d : t.shape) elements *= d;
    if (static_cast<std::size_t>(elements) != t.values.size())
      throw std::logic_error(fmt::format("write_safetensors: tensor '{}' has {} values for shape [{}]", t.name,
                                         t.values.size(), fmt::join(t.shape, ", ")));
    const std::uint64_t bytes = t.values.size() * element;
    header[t.name] = {{"dtype", type}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw input_error(fmt::format("{}: cannot open for writing", path.string()));
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xff);
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<unsigned char> buffer;
  for (const auto& t : tensors) {
    buffer.resize(t.values.size() * element);
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      if (file_dtype == dtype::fp32) {
        std::memcpy(&buffer[4 * i], &t.values[i], 4);
        continue;
      }
      const std::uint16_t bits = file_dtype == dtype::bf16 ? gemm::numeric::float_to_bf16(t.values[i])
                                                            : gemm::numeric::float_to_fp16(t.values[i]);
      buffer[2 * i] = static_cast<unsigned char>(bits & 0xff);
      buffer[2 * i + 1] = static_cast<unsigned char>(bits >> 8);
    }
    out.write(reinterpret_cast<const char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
  }
  if (!out) throw input_error(fmt::format("{}: write failed", path.string()));
}

}  // namespace itera::llm
