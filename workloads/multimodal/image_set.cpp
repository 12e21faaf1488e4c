#include "workloads/multimodal/image_set.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <iterator>
#include <set>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"
#include "workloads/multimodal/requests.hpp"
#include "workloads/multimodal/synth.hpp"
#include "workloads/multimodal/thread_pool.hpp"

namespace itera::mm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::uint32_t max_generated_side = 16384;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

image_format format_from_extension(const fs::path& path) {
  const auto ext = lower(path.extension().string());
  if (ext == ".jpg" || ext == ".jpeg" || ext == ".jpe" || ext == ".jfif") return image_format::jpeg;
  if (ext == ".png") return image_format::png;
  if (ext == ".gif") return image_format::gif;
  if (ext == ".bmp") return image_format::bmp;
  if (ext == ".webp") return image_format::webp;
  if (ext == ".tif" || ext == ".tiff") return image_format::tiff;
  if (ext == ".heic" || ext == ".heif") return image_format::heif;
  if (ext == ".avif") return image_format::avif;
  if (ext == ".jp2" || ext == ".j2k") return image_format::jpeg2000;
  if (ext == ".jxl") return image_format::jpegxl;
  return image_format::unknown;
}

image_format format_from_name(const std::string& name) {
  for (auto f : {image_format::jpeg, image_format::png, image_format::gif, image_format::bmp, image_format::webp,
                 image_format::tiff, image_format::heif, image_format::avif, image_format::jpeg2000,
                 image_format::jpegxl})
    if (format_name(f) == name) return f;
  return image_format::unknown;
}

bool is_hidden(const fs::path& p) {
  const auto name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// A manifest path must stay inside the set's folder.
bool safe_relative(const std::string& rel) {
  if (rel.empty() || rel[0] == '/' || rel.find('\\') != std::string::npos) return false;
  const fs::path p(rel);
  if (p.is_absolute() || p.has_root_name()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

image_set from_manifest(const fs::path& dir, const json& m) {
  const auto manifest = (dir / manifest_file).string();
  const auto bad = [&](const std::string& what) {
    return input_error(fmt::format("{}: {} (regenerate the set with `itera data images`, or remove the manifest to "
                                   "list the folder's images instead)", manifest, what));
  };
  if (!m.contains("images") || !m["images"].is_array()) throw bad("\"images\" is missing or not a list");
  image_set set;
  set.root = dir;
  set.from_manifest = true;
  const auto& images = m["images"];
  for (std::size_t i = 0; i < images.size(); ++i) {
    const auto& e = images[i];
    const auto where = fmt::format("image {}", i);
    if (!e.is_object()) throw bad(where + " is not an object");
    if (!e.contains("index") || !e["index"].is_number_unsigned() || e["index"].get<std::uint64_t>() != i)
      throw bad(where + ": \"index\" must be its position in the list, " + std::to_string(i));
    if (!e.contains("path") || !e["path"].is_string() || !safe_relative(e["path"].get<std::string>()))
      throw bad(where + ": \"path\" must be a relative path inside the set's folder");
    image_entry entry;
    entry.index = i;
    entry.relative_path = e["path"].get<std::string>();
    entry.path = dir / fs::path(entry.relative_path);
    if (e.contains("format") && e["format"].is_string()) entry.format = format_from_name(e["format"].get<std::string>());
    for (const char* key : {"width", "height"}) {
      if (!e.contains(key) || !e[key].is_number_unsigned() || e[key].get<std::uint64_t>() > 1000000)
        throw bad(fmt::format("{}: \"{}\" must be a whole number of pixels", where, key));
    }
    entry.width = e["width"].get<std::uint32_t>();
    entry.height = e["height"].get<std::uint32_t>();
    if (e.contains("bytes") && e["bytes"].is_number_unsigned()) entry.bytes = e["bytes"].get<std::uint64_t>();
    set.entries.push_back(std::move(entry));
  }
  if (set.entries.empty()) throw bad("the set lists no image");
  return set;
}

std::vector<std::uint8_t> to_bytes(const rgb_image& img, image_format format, int quality) {
  return format == image_format::jpeg ? encode_jpeg(img, quality) : encode_png(img);
}

void write_file(const fs::path& path, const void* data, std::size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  f.close();
  if (!f) throw input_error(fmt::format("cannot write {} (disk full or no permission?)", path.string()));
}

}  // namespace

bool has_image_extension(const fs::path& path) { return format_from_extension(path) != image_format::unknown; }

image_set list_images(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw input_error(fmt::format("{} is not a folder: give the folder that holds the images", dir.string()));
  const auto manifest_path = dir / manifest_file;
  if (fs::is_regular_file(manifest_path, ec)) {
    std::ifstream f(manifest_path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f && !f.eof()) throw input_error(fmt::format("cannot read {}", manifest_path.string()));
    const json m = json::parse(text, nullptr, false);
    if (!m.is_discarded() && m.is_object() && m.value("format", std::string()) == manifest_format)
      return from_manifest(dir, m);
    // another program's manifest.json: the folder is listed like any other
  }
  image_set set;
  set.root = dir;
  std::vector<std::pair<std::string, fs::path>> found;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) throw input_error(fmt::format("cannot list {}: {}", dir.string(), ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) throw input_error(fmt::format("cannot list {}: {}", dir.string(), ec.message()));
    const auto& p = it->path();
    if (is_hidden(p)) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    if (!has_image_extension(p)) {
      ++set.skipped_files;
      continue;
    }
    found.emplace_back(fs::relative(p, dir, ec).generic_string(), p);
  }
  std::sort(found.begin(), found.end());
  for (auto& [rel, path] : found) {
    image_entry e;
    e.index = set.entries.size();
    e.relative_path = rel;
    e.path = path;
    e.format = format_from_extension(path);
    e.bytes = fs::file_size(path, ec);
    if (ec) e.bytes = 0;
    set.entries.push_back(std::move(e));
  }
  if (set.entries.empty())
    throw input_error(fmt::format(
        "{} holds no image file (.jpg, .jpeg or .png; {} other files were left out): point at a folder of images "
        "or generate one with `itera data images --out DIR`",
        dir.string(), set.skipped_files));
  return set;
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> parse_sizes(std::string_view text) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> sizes;
  const auto bad = [](std::string_view item, std::string_view why) {
    return usage_error(fmt::format("--sizes: '{}' {}; write sizes as N (square) or WxH, comma-separated, e.g. "
                                   "--sizes 224,1024,1280x720",
                                   item, why));
  };
  const auto parse_side = [&](std::string_view item, std::string_view digits) {
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size()) throw bad(item, "is not a size");
    if (v < 1 || v > max_generated_side) throw bad(item, fmt::format("has a side outside 1..{}", max_generated_side));
    return static_cast<std::uint32_t>(v);
  };
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const auto item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (item.empty()) throw bad(item, "is empty");
    const auto x = item.find_first_of("xX");
    std::pair<std::uint32_t, std::uint32_t> size;
    if (x == std::string_view::npos) size = {parse_side(item, item), parse_side(item, item)};
    else size = {parse_side(item, item.substr(0, x)), parse_side(item, item.substr(x + 1))};
    if (std::find(sizes.begin(), sizes.end(), size) != sizes.end()) throw bad(item, "is given twice");
    sizes.push_back(size);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return sizes;
}

std::string fnv1a64_hex(const std::uint8_t* data, std::size_t size) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < size; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

image_set_summary write_image_set(const fs::path& out, const image_set_spec& spec) {
  if (spec.sizes.empty()) throw usage_error("--sizes: give at least one size, e.g. --sizes 224,1024");
  for (const auto& [w, h] : spec.sizes)
    if (w < 1 || h < 1 || w > max_generated_side || h > max_generated_side)
      throw usage_error(fmt::format("--sizes: {}x{} has a side outside 1..{}", w, h, max_generated_side));
  if (spec.count < 1 || spec.count > 10000) throw usage_error("--count must be 1..10000 images per size and format");
  if (spec.formats.empty()) throw usage_error("--formats: give jpeg, png or both");
  for (auto f : spec.formats)
    if (f != image_format::jpeg && f != image_format::png)
      throw usage_error(fmt::format("--formats: {} cannot be generated; give jpeg, png or both", format_name(f)));
  if (spec.jpeg_quality < 1 || spec.jpeg_quality > 100) throw usage_error("--jpeg-quality must be 1..100");
  if (spec.max_images_per_request < 1) throw usage_error("--max-images-per-request must be at least 1");
  if (spec.prompt_tokens < 1) throw usage_error("--prompt-tokens must be at least 1");
  if (spec.output_tokens < 1) throw usage_error("--output-tokens must be at least 1");

  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec))
      throw usage_error(fmt::format("--out {} is a file, not a folder: name a new or empty folder", out.string()));
    if (!fs::is_empty(out, ec))
      throw usage_error(fmt::format(
          "--out {} is not empty: itera data images writes a new set and never writes over files; name a new or "
          "empty folder",
          out.string()));
  }
  fs::create_directories(out / "images", ec);
  if (ec) throw input_error(fmt::format("cannot create {}: {}", (out / "images").string(), ec.message()));

  struct planned {
    std::uint32_t width, height;
    std::size_t copy;
    std::size_t first_index;
  };
  std::vector<planned> contents;  // one synthesized image per (size, copy), encoded per format
  std::size_t index = 0;
  for (const auto& [w, h] : spec.sizes)
    for (std::size_t k = 0; k < spec.count; ++k) {
      contents.push_back({w, h, k, index});
      index += spec.formats.size();
    }
  const std::size_t total = index;
  std::vector<json> images(total);
  std::vector<std::uint64_t> sizes(total, 0);

  thread_pool pool(spec.threads ? spec.threads : thread_pool::hardware_threads());
  pool.for_each(contents.size(), [&](std::size_t item, std::size_t) {
    const auto& c = contents[item];
    const std::uint64_t content_seed = splitmix64(spec.seed ^ splitmix64(c.copy));
    const auto img = synthesize_photo(content_seed, c.width, c.height);
    for (std::size_t f = 0; f < spec.formats.size(); ++f) {
      const auto format = spec.formats[f];
      const std::size_t i = c.first_index + f;
      const auto bytes = to_bytes(img, format, spec.jpeg_quality);
      const auto rel = fmt::format("images/{:06}_{}x{}.{}", i, c.width, c.height,
                                   format == image_format::jpeg ? "jpg" : "png");
      write_file(out / rel, bytes.data(), bytes.size());
      sizes[i] = bytes.size();
      images[i] = json{{"index", i},
                       {"path", rel},
                       {"format", std::string(format_name(format))},
                       {"width", c.width},
                       {"height", c.height},
                       {"bytes", bytes.size()},
                       {"fnv1a64", fnv1a64_hex(bytes.data(), bytes.size())}};
    }
  });

  const auto requests = make_requests(spec.seed, spec.requests, total, spec.max_images_per_request,
                                      spec.prompt_tokens, spec.output_tokens);
  const auto requests_text = format_requests(requests);
  write_file(out / requests_file, requests_text.data(), requests_text.size());

  json sizes_json = json::array();
  for (const auto& [w, h] : spec.sizes) sizes_json.push_back(fmt::format("{}x{}", w, h));
  json formats_json = json::array();
  for (auto f : spec.formats) formats_json.push_back(std::string(format_name(f)));
  const json manifest{{"format", manifest_format},
                      {"generator", "itera data images"},
                      {"seed", spec.seed},
                      {"sizes", sizes_json},
                      {"count", spec.count},
                      {"formats", formats_json},
                      {"jpeg_quality", spec.jpeg_quality},
                      {"images", images},
                      {"requests",
                       {{"path", requests_file},
                        {"count", requests.size()},
                        {"max_images_per_request", spec.max_images_per_request},
                        {"prompt_tokens", spec.prompt_tokens},
                        {"output_tokens", spec.output_tokens}}}};
  const auto manifest_text = manifest.dump(1) + "\n";
  write_file(out / manifest_file, manifest_text.data(), manifest_text.size());

  image_set_summary summary;
  summary.images = total;
  for (auto s : sizes) summary.bytes += s;
  summary.requests = requests.size();
  summary.manifest = out / manifest_file;
  summary.requests_path = out / requests_file;
  return summary;
}

}  // namespace itera::mm
