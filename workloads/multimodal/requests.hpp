#pragma once
// Requests of the multimodal workload, as JSON lines; one line is one request:
//   {"images": [3, 17], "prompt_tokens": 128, "output_tokens": 64}
//   {"images": ["photos/cat.jpg"], "prompt_tokens": 40, "output_tokens": 64}
// "images": 1 or more images, each an index into the set (manifest order, or the sorted listing of
// a folder) or a path relative to the set's folder ('/'-separated); the same image may appear twice.
// "prompt_tokens": the text prompt's length in tokens, >= 1. "output_tokens": tokens to generate,
// >= 1 (a fixed output length across requests keeps their generation cost comparable, R10).
// Other keys are errors (they catch typos). A bad line is an error of its own naming the line and
// what was wrong; the good lines still run. Messages never echo a path or any other text from the
// file (R18), only numbers, key names and JSON types.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "workloads/multimodal/image_set.hpp"

namespace itera::mm {

struct image_request {
  std::int64_t line = 0;             // 1-based line in the file
  std::vector<std::size_t> images;   // indices into the image set
  std::uint32_t prompt_tokens = 0;
  std::uint32_t output_tokens = 0;
};

struct request_error {
  std::int64_t line = 0;
  std::string message;  // "line 7: ..."
};

struct request_set {
  std::vector<image_request> requests;  // good lines, in file order
  std::vector<request_error> errors;    // bad lines, in file order
};

// Lines end with \n or \r\n; blank lines are skipped (they still count for line numbers).
request_set parse_requests(std::string_view text, const image_set& images);

// Reads then parses; input_error naming the path when the file cannot be read.
request_set read_requests(const std::filesystem::path& path, const image_set& images);

// `count` requests over `image_count` images: request r has 1..min(max_images, image_count) distinct
// images, the number and the images drawn uniformly from splitmix64(seed, r); every request has the
// given prompt and output lengths. Pure function of its arguments.
std::vector<image_request> make_requests(std::uint64_t seed, std::size_t count, std::size_t image_count,
                                         std::size_t max_images, std::uint32_t prompt_tokens,
                                         std::uint32_t output_tokens);

// One line per request, in the form above (indices).
std::string format_requests(const std::vector<image_request>& requests);

}  // namespace itera::mm
