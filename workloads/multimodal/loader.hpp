#pragma once
// The multimodal workload's first two stages on the CPU: read (file bytes into memory) and decode
// (libjpeg-turbo / libpng on a pool of threads, into RGB8 HWC). A bad image never stops a batch: it
// is recorded as an image_error with its index and the reason, and the others go on.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "workloads/multimodal/image_codec.hpp"
#include "workloads/multimodal/image_set.hpp"
#include "workloads/multimodal/thread_pool.hpp"

namespace itera::mm {

// One image that failed. Index only, never the file's name or contents (R18).
struct image_error {
  std::size_t index = 0;
  std::string stage;   // "read" or "decode"
  std::string reason;  // what was wrong and how to fix it
};

struct read_batch {
  std::vector<std::vector<std::uint8_t>> bytes;  // per entry; empty when the read failed
  std::vector<char> ok;                          // per entry: 1 when read (a 0-byte file reads fine)
  std::vector<std::int64_t> read_ns;             // per entry, host time of open + read + close
  std::vector<image_error> errors;               // by index
  std::int64_t wall_ns = 0;                      // the whole stage
  std::uint64_t total_bytes = 0;                 // of the files read
};

// Reads every entry into memory, on `pool` when given (one file per item), else on this thread.
read_batch read_images(const image_set& set, thread_pool* pool = nullptr);

// Bytes already in memory (tests, a caller with its own I/O): the read stage without files.
read_batch from_memory(std::vector<std::vector<std::uint8_t>> files);

struct decode_batch {
  std::vector<rgb_image> images;       // per entry; empty (0x0) when it failed or was not read
  std::vector<char> ok;                // per entry: 1 when decoded
  std::vector<std::int64_t> decode_ns; // per entry, host time on its worker (0 when not read)
  std::vector<image_error> errors;     // read errors carried over, then decode errors; by index
  std::int64_t wall_ns = 0;            // the whole stage
  std::size_t good = 0, bad = 0;       // bad counts read and decode failures
  std::uint64_t input_bytes = 0;       // compressed bytes of the good images
  std::uint64_t output_bytes = 0;      // RGB8 bytes of the good images
};

// Decodes every image that was read, on `pool` (one decoder per worker). Never throws for bad
// images; std::bad_alloc for an image that cannot be allocated is recorded as its error too.
decode_batch decode_images(const read_batch& read, thread_pool& pool, const image_limits& limits = {});

// Decode throughput at each thread count: the whole set decoded `passes` times per count (outputs
// dropped after each image), after one untimed warm-up pass.
struct decode_bench_point {
  std::size_t threads = 0;
  std::vector<std::int64_t> pass_ns;  // wall time of each timed pass
  std::int64_t median_ns = 0;         // of pass_ns (the lower middle for an even count)
  double images_per_s = 0;            // good images / median pass time
  double input_mb_per_s = 0;          // compressed bytes of the good images / median, 10^6 bytes
  double megapixels_per_s = 0;        // decoded pixels / median, 10^6 pixels
  double speedup = 0;                 // images_per_s over the 1-thread point's (0 without one)
};

struct decode_bench_result {
  std::size_t images = 0, good = 0, bad = 0;
  std::uint64_t input_bytes = 0;   // of the good images
  std::uint64_t pixels = 0;        // of the good images
  std::vector<image_error> errors; // from the warm-up pass
  std::vector<decode_bench_point> points;
};

// 1, 2, 4, ... up to `hardware` threads, with `hardware` itself last when it is not a power of two.
std::vector<std::size_t> default_thread_counts(std::size_t hardware);

// usage_error for an empty list, a zero thread count or passes < 1.
decode_bench_result benchmark_decode(const read_batch& read, std::span<const std::size_t> thread_counts,
                                     int passes = 3, const image_limits& limits = {});

}  // namespace itera::mm
