#pragma once
// Prompts for the LLM workload's end-to-end loop, read from a JSON-lines file, and the generated
// ids written back. One line is one request:
//   {"tokens": [1, 15043, 29871], "output_len": 64}   the prompt ids themselves
//   {"prompt_len": 512, "output_len": 128}            a length; the ids are synthesised (seeded)
// "output_len" is optional (prompt_limits::default_output). A bad line is an error of its own that
// names the line, what was wrong with the values, and how to fix it; the good lines still run.
// Messages carry numbers, key names and JSON types, never prompt text.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace itera::llm {

struct prompt_limits {
  std::int64_t vocab = 0;           // ids must be in [0, vocab); 1..2^31
  std::int64_t max_context = 0;     // prompt + output tokens must be <= max_context; >= 1
  std::int64_t default_output = 0;  // output tokens when a line does not give "output_len"; >= 0
  std::uint64_t seed = 1;           // synthesises ids for lines that give only a length
};

struct prompt_request {
  std::int64_t line = 0;             // 1-based line number in the file
  std::vector<std::int32_t> tokens;  // the prompt ids
  std::int64_t output_tokens = 0;
};

struct prompt_error {
  std::int64_t line = 0;
  std::string message;  // names the line: "line 7: ..."
};

struct prompt_set {
  std::vector<prompt_request> requests;  // good lines, in file order
  std::vector<prompt_error> errors;      // bad lines, in file order; the good ones still run
  std::uint64_t bytes = 0;               // bytes of text parsed
  std::int64_t rejected_too_long = 0;    // how many of the errors are "longer than the context"
};

// Lines end with \n or \r\n; the last may have no newline; a UTF-8 byte order mark at the start is
// skipped. Blank or whitespace-only lines are skipped (they still count for line numbers). Keys
// other than tokens, prompt_len and output_len are errors (they catch typos). Token positions in
// messages count from 0. usage_error when the limits themselves are out of range.
prompt_set parse_prompts(std::string_view text, const prompt_limits& limits);

// Reads the whole file then parses. input_error naming the path when it cannot be opened or read.
// An empty file or one with no good line is not an error here (the caller decides): prompt_set says.
prompt_set read_prompts(const std::filesystem::path& path, const prompt_limits& limits);

// A synthetic prompts file: `count` lines {"prompt_len": P, "output_len": O}. Overwrites.
// usage_error for count < 0 or a length < 1; input_error on write failure.
void write_synthetic_prompts(const std::filesystem::path& path, std::int64_t count, std::int64_t prompt_len,
                             std::int64_t output_len);

// Deterministic ids for a prompt given by length only: a pure function of (seed, line, position),
// each in [0, vocab). splitmix64 arithmetic, so the same on every platform and standard library.
std::vector<std::int32_t> synthetic_prompt(std::uint64_t seed, std::int64_t line, std::int64_t length,
                                           std::int64_t vocab);

// The generated ids as JSON lines, one per request, in the order given:
//   {"line": L, "prompt_tokens": N, "tokens": [ids...]}
// Returns the text (the caller times formatting and writing separately). std::invalid_argument
// when the two spans differ in length.
std::string format_generations(std::span<const prompt_request> requests,
                               std::span<const std::vector<std::int32_t>> generated);

// Writes text to path (overwrites), throwing input_error naming the path on failure.
void write_text_file(const std::filesystem::path& path, std::string_view text);

}  // namespace itera::llm
