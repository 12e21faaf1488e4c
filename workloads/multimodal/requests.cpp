#include "workloads/multimodal/requests.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <numeric>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"
#include "workloads/multimodal/synth.hpp"

namespace itera::mm {
namespace {

using nlohmann::json;

struct line_fault {
  std::string what;
};

[[noreturn]] void fault(std::string what) { throw line_fault{std::move(what)}; }

// A value as a message may show it: numbers as written, anything else by its JSON type only.
std::string describe(const json& v) {
  if (v.is_number()) return v.dump();
  switch (v.type()) {
    case json::value_t::string: return "a string";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::null: return "null";
    default: return "a JSON value";
  }
}

std::uint32_t read_tokens(const json& obj, const char* key) {
  if (!obj.contains(key)) fault(fmt::format("\"{}\" is missing (write e.g. \"{}\": 64)", key, key));
  const auto& v = obj[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (std::int64_t{1} << 24))
    fault(fmt::format("\"{}\" must be a whole number from 1 to {}, found {}", key, std::int64_t{1} << 24, describe(v)));
  return static_cast<std::uint32_t>(v.get<std::int64_t>());
}

image_request parse_line(std::string_view line, const image_set& set,
                         const std::unordered_map<std::string, std::size_t>& by_path) {
  const json obj = json::parse(line, nullptr, false);
  if (obj.is_discarded()) fault("not valid JSON (one JSON object per line)");
  if (!obj.is_object()) fault(fmt::format("must be a JSON object, found {}", describe(obj)));
  for (const auto& [key, value] : obj.items())
    if (key != "images" && key != "prompt_tokens" && key != "output_tokens")
      fault(fmt::format("unknown key of {} characters (the keys are images, prompt_tokens, output_tokens)",
                        key.size()));
  image_request r;
  if (!obj.contains("images")) fault("\"images\" is missing (write e.g. \"images\": [0, 3])");
  const auto& images = obj["images"];
  if (!images.is_array() || images.empty())
    fault(fmt::format("\"images\" must be a non-empty list of image indices or paths, found {}",
                      images.is_array() ? "an empty list" : describe(images)));
  for (std::size_t k = 0; k < images.size(); ++k) {
    const auto& v = images[k];
    if (v.is_number_integer()) {
      const auto i = v.get<std::int64_t>();
      if (i < 0 || static_cast<std::uint64_t>(i) >= set.entries.size())
        fault(fmt::format("image {} of the request is index {}, outside the set's 0..{}", k, i,
                          set.entries.size() - 1));
      r.images.push_back(static_cast<std::size_t>(i));
    } else if (v.is_string()) {
      const auto it = by_path.find(v.get<std::string>());
      if (it == by_path.end())
        fault(fmt::format("image {} of the request is a path that is not in the set (paths are relative to the "
                          "set's folder, '/'-separated)",
                          k));
      r.images.push_back(it->second);
    } else {
      fault(fmt::format("image {} of the request must be an index or a relative path, found {}", k, describe(v)));
    }
  }
  r.prompt_tokens = read_tokens(obj, "prompt_tokens");
  r.output_tokens = read_tokens(obj, "output_tokens");
  return r;
}

}  // namespace

request_set parse_requests(std::string_view text, const image_set& images) {
  std::unordered_map<std::string, std::size_t> by_path;
  for (const auto& e : images.entries) by_path.emplace(e.relative_path, e.index);
  request_set out;
  std::int64_t number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    auto line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    try {
      auto r = parse_line(line, images, by_path);
      r.line = number;
      out.requests.push_back(std::move(r));
    } catch (const line_fault& f) {
      out.errors.push_back({number, fmt::format("line {}: {}", number, f.what)});
    }
  }
  return out;
}

request_set read_requests(const std::filesystem::path& path, const image_set& images) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw input_error(fmt::format("cannot open the requests file {}", path.string()));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw input_error(fmt::format("cannot read the requests file {}", path.string()));
  return parse_requests(text, images);
}

std::vector<image_request> make_requests(std::uint64_t seed, std::size_t count, std::size_t image_count,
                                         std::size_t max_images, std::uint32_t prompt_tokens,
                                         std::uint32_t output_tokens) {
  std::vector<image_request> out;
  if (image_count == 0 || max_images == 0) return out;
  const std::size_t most = std::min(max_images, image_count);
  std::vector<std::size_t> pool(image_count);
  for (std::size_t r = 0; r < count; ++r) {
    std::uint64_t state = splitmix64(seed ^ 0x5EED0F1A6E5EEDull) ^ splitmix64(r);
    const auto draw = [&](std::size_t n) { return static_cast<std::size_t>(splitmix64(state++) % n); };
    std::iota(pool.begin(), pool.end(), std::size_t{0});
    image_request q;
    q.line = static_cast<std::int64_t>(r + 1);
    const std::size_t k = 1 + draw(most);
    for (std::size_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct images
      std::swap(pool[j], pool[j + draw(image_count - j)]);
      q.images.push_back(pool[j]);
    }
    q.prompt_tokens = prompt_tokens;
    q.output_tokens = output_tokens;
    out.push_back(std::move(q));
  }
  return out;
}

std::string format_requests(const std::vector<image_request>& requests) {
  std::string out;
  for (const auto& r : requests)
    out += json{{"images", r.images}, {"prompt_tokens", r.prompt_tokens}, {"output_tokens", r.output_tokens}}.dump() +
           "\n";
  return out;
}

}  // namespace itera::mm
