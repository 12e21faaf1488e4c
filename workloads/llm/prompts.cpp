#include "workloads/llm/prompts.hpp"

#include <cerrno>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"

namespace itera::llm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::int64_t max_vocab = std::int64_t{1} << 31;  // ids are int32
constexpr std::int64_t max_length_shown = 64;              // of a key name in a message

// What was wrong with one line; caught in parse_prompts, which adds the line number.
struct line_fault {
  std::string what;
  bool too_long = false;
};

[[noreturn]] void fault(std::string what, bool too_long = false) { throw line_fault{std::move(what), too_long}; }

// A value as a message may show it: numbers as written, anything else by its JSON type only, so
// that no prompt text reaches a message.
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

// A key name for a message, quoted, cut short when long.
std::string key_name(const std::string& key) {
  std::string quoted = json(key).dump(-1, ' ', false, json::error_handler_t::replace);
  if (static_cast<std::int64_t>(quoted.size()) > max_length_shown) {
    quoted.resize(static_cast<std::size_t>(max_length_shown));
    quoted += "...";
  }
  return quoted;
}

// "prompt_len" or "output_len": a whole number >= 1.
std::int64_t read_length(const json& v, const char* key) {
  if (!v.is_number_integer())
    fault(fmt::format("\"{}\" must be a whole number >= 1, found {} (write e.g. \"{}\": 128)", key, describe(v), key));
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > most)
    fault(fmt::format("\"{}\" is {}, beyond any context (give a realistic length)", key, v.dump()));
  const auto n = v.get<std::int64_t>();
  if (n < 1) fault(fmt::format("\"{}\" is {} (give a length of at least 1)", key, n));
  return n;
}

// "tokens": a non-empty list of ids in [0, vocab).
std::vector<std::int32_t> read_tokens(const json& v, std::int64_t vocab) {
  if (!v.is_array())
    fault(fmt::format("\"tokens\" must be a list of integer ids, found {} (write e.g. \"tokens\": [1, 2, 3])",
                      describe(v)));
  if (v.empty()) fault("\"tokens\" is an empty list (give at least one id, or a \"prompt_len\" instead)");
  std::vector<std::int32_t> ids;
  ids.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    if (!t.is_number_integer())
      fault(fmt::format("token at position {} is {}, not an integer id (give ids from the model's tokenizer)", i,
                        describe(t)));
    const bool inside = t.is_number_unsigned() ? t.get<std::uint64_t>() < static_cast<std::uint64_t>(vocab)
                                               : t.get<std::int64_t>() >= 0 && t.get<std::int64_t>() < vocab;
    if (!inside)
      fault(fmt::format("token {} at position {} is outside the vocabulary 0..{} (give ids from the model's "
                        "tokenizer, or a model with a larger vocabulary)",
                        t.dump(), i, vocab - 1));
    ids.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
  }
  return ids;
}

// One non-blank line to a request (tokens synthesised when only a length is given).
prompt_request parse_line(std::string_view line, std::int64_t line_no, const prompt_limits& limits) {
  json j;
  try {
    j = json::parse(line.begin(), line.end());
  } catch (const json::parse_error& e) {
    // e.what() quotes the text it read; only the position goes into the message.
    fault(fmt::format("not valid JSON (syntax error at byte {} of the line; each line is one object such as "
                      "{{\"prompt_len\": 128, \"output_len\": 64}})",
                      e.byte));
  }
  if (!j.is_object())
    fault(fmt::format("the line is {}, not a JSON object (write {{\"tokens\": [...]}} or {{\"prompt_len\": N}})",
                      describe(j)));
  for (const auto& [key, value] : j.items()) {
    if (key == "tokens" || key == "prompt_len" || key == "output_len") continue;
    if (key == "prompt" || key == "text")
      fault(fmt::format("unknown key {} (prompts are token ids, not text: give \"tokens\" from the model's "
                        "tokenizer, or \"prompt_len\")",
                        key_name(key)));
    fault(fmt::format("unknown key {} (the keys are \"tokens\", \"prompt_len\" and \"output_len\")", key_name(key)));
  }
  const bool has_tokens = j.contains("tokens"), has_length = j.contains("prompt_len");
  if (has_tokens && has_length)
    fault("gives both \"tokens\" and \"prompt_len\" (give one: the ids, or a length for synthetic ids)");
  if (!has_tokens && !has_length)
    fault("gives neither \"tokens\" nor \"prompt_len\" (give one: the ids, or a length for synthetic ids)");

  prompt_request r;
  r.line = line_no;
  std::int64_t prompt_tokens = 0;
  if (has_tokens) {
    r.tokens = read_tokens(j["tokens"], limits.vocab);
    prompt_tokens = static_cast<std::int64_t>(r.tokens.size());
  } else {
    prompt_tokens = read_length(j["prompt_len"], "prompt_len");
  }
  r.output_tokens = j.contains("output_len") ? read_length(j["output_len"], "output_len") : limits.default_output;

  // Both are at most INT64_MAX, so their sum fits in 64 unsigned bits.
  const auto total = static_cast<std::uint64_t>(prompt_tokens) + static_cast<std::uint64_t>(r.output_tokens);
  if (total > static_cast<std::uint64_t>(limits.max_context)) {
    const char* fix = r.output_tokens >= limits.max_context ? "lower output_len or raise --axis context"
                                                            : "shorten the prompt or raise --axis context";
    fault(fmt::format("prompt of {} tokens + {} output tokens = {} exceed the context of {} ({})", prompt_tokens,
                      r.output_tokens, total, limits.max_context, fix),
          true);
  }
  if (!has_tokens) r.tokens = synthetic_prompt(limits.seed, line_no, prompt_tokens, limits.vocab);
  return r;
}

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r\n\v\f") == std::string_view::npos; }

std::string errno_text(int err) {
  return err != 0 ? std::error_code(err, std::generic_category()).message() : std::string("unknown reason");
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

prompt_set parse_prompts(std::string_view text, const prompt_limits& limits) {
  if (limits.vocab < 1 || limits.vocab > max_vocab)
    throw usage_error(fmt::format("prompts: vocabulary of {} ids, must be 1..{}", limits.vocab, max_vocab));
  if (limits.max_context < 1)
    throw usage_error(fmt::format("prompts: context of {} tokens, must be at least 1", limits.max_context));
  if (limits.default_output < 0)
    throw usage_error(fmt::format("prompts: default output of {} tokens, must be at least 0", limits.default_output));

  prompt_set set;
  set.bytes = text.size();
  std::size_t pos = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;  // a UTF-8 byte order mark
  std::int64_t line_no = 0;
  while (pos < text.size()) {
    const std::size_t newline = text.find('\n', pos);
    const std::size_t end = newline == std::string_view::npos ? text.size() : newline;
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (blank(line)) continue;
    try {
      set.requests.push_back(parse_line(line, line_no, limits));
    } catch (const line_fault& f) {
      set.errors.push_back({line_no, fmt::format("line {}: {}", line_no, f.what)});
      if (f.too_long) ++set.rejected_too_long;
    }
  }
  return set;
}

prompt_set read_prompts(const fs::path& path, const prompt_limits& limits) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw input_error(fmt::format("{}: is a folder; give the prompts file (JSON lines) in it", path.string()));
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(fmt::format("{}: cannot open the prompts file ({})", path.string(), errno_text(errno)));
  std::string text;
  if (const auto size = fs::file_size(path, ec); !ec) text.reserve(static_cast<std::size_t>(size));
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) text.append(chunk, static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw input_error(fmt::format("{}: reading the prompts file failed", path.string()));
  return parse_prompts(text, limits);
}

void write_synthetic_prompts(const fs::path& path, std::int64_t count, std::int64_t prompt_len,
                             std::int64_t output_len) {
  if (count < 0) throw usage_error(fmt::format("synthetic prompts: count {} must be at least 0", count));
  if (prompt_len < 1 || output_len < 1)
    throw usage_error(fmt::format("synthetic prompts: prompt length {} and output length {} must be at least 1",
                                  prompt_len, output_len));
  const std::string line = fmt::format("{{\"prompt_len\": {}, \"output_len\": {}}}\n", prompt_len, output_len);
  std::string text;
  text.reserve(line.size() * static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) text += line;
  write_text_file(path, text);
}

std::vector<std::int32_t> synthetic_prompt(std::uint64_t seed, std::int64_t line, std::int64_t length,
                                           std::int64_t vocab) {
  if (vocab < 1 || vocab > max_vocab)
    throw usage_error(fmt::format("synthetic prompt: vocabulary of {} ids, must be 1..{}", vocab, max_vocab));
  if (length < 0) throw usage_error(fmt::format("synthetic prompt: length {} must be at least 0", length));
  const std::uint64_t base = splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(line));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(length));
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<std::int32_t>(splitmix64(base + i) % static_cast<std::uint64_t>(vocab));
  return ids;
}

std::string format_generations(std::span<const prompt_request> requests,
                               std::span<const std::vector<std::int32_t>> generated) {
  if (requests.size() != generated.size())
    throw std::invalid_argument(fmt::format("format_generations: {} requests but {} generations", requests.size(),
                                            generated.size()));
  fmt::memory_buffer out;
  auto to = std::back_inserter(out);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    fmt::format_to(to, "{{\"line\": {}, \"prompt_tokens\": {}, \"tokens\": [{}]}}\n", requests[i].line,
                   requests[i].tokens.size(), fmt::join(generated[i], ", "));
  }
  return fmt::to_string(out);
}

void write_text_file(const fs::path& path, std::string_view text) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw input_error(fmt::format("{}: cannot open for writing ({})", path.string(), errno_text(errno)));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw input_error(fmt::format("{}: writing failed ({})", path.string(), errno_text(errno)));
}

}  // namespace itera::llm
