#include "workloads/multimodal/loader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "itera/core/timer.hpp"

namespace itera::mm {
namespace {

// Reads one whole file; the reason (without the path) on failure.
bool read_file(const std::filesystem::path& path, std::vector<std::uint8_t>& out, std::string& reason) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    reason = fmt::format("cannot open the file ({}): check that it exists and is readable", std::strerror(errno));
    return false;
  }
  out.clear();
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec) out.reserve(size);
  std::uint8_t chunk[1 << 16];
  for (;;) {
    const std::size_t n = std::fread(chunk, 1, sizeof chunk, f.get());
    out.insert(out.end(), chunk, chunk + n);
    if (n < sizeof chunk) break;
  }
  if (std::ferror(f.get())) {
    reason = fmt::format("reading the file failed ({})", std::strerror(errno));
    return false;
  }
  return true;
}

void sort_errors(std::vector<image_error>& errors) {
  std::stable_sort(errors.begin(), errors.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
}

// Decodes one image into `out`, the reason on failure. Catches everything a decoder may throw.
bool decode_one(image_decoder& decoder, std::span<const std::uint8_t> bytes, const image_limits& limits,
                rgb_image& out, std::string& reason) {
  try {
    decoder.decode(bytes, limits, out);
    return true;
  } catch (const decode_failure& e) {
    reason = e.what();
  } catch (const std::bad_alloc&) {
    reason = "out of memory while decoding: lower the dimension limits or decode fewer images at once";
  } catch (const std::exception& e) {
    reason = fmt::format("decoder failed: {}", e.what());
  }
  out = rgb_image{};
  return false;
}

}  // namespace

read_batch read_images(const image_set& set, thread_pool* pool) {
  const std::size_t n = set.entries.size();
  read_batch out;
  out.bytes.resize(n);
  out.ok.assign(n, 0);
  out.read_ns.assign(n, 0);
  std::vector<std::string> reasons(n);
  const auto one = [&](std::size_t i, std::size_t) {
    const auto t0 = host_now_ns();
    out.ok[i] = read_file(set.entries[i].path, out.bytes[i], reasons[i]) ? 1 : 0;
    if (!out.ok[i]) out.bytes[i].clear();
    out.read_ns[i] = host_now_ns() - t0;
  };
  const auto t0 = host_now_ns();
  if (pool) pool->for_each(n, one);
  else
    for (std::size_t i = 0; i < n; ++i) one(i, 0);
  out.wall_ns = host_now_ns() - t0;
  for (std::size_t i = 0; i < n; ++i) {
    if (out.ok[i]) out.total_bytes += out.bytes[i].size();
    else out.errors.push_back({i, "read", reasons[i]});
  }
  return out;
}

read_batch from_memory(std::vector<std::vector<std::uint8_t>> files) {
  read_batch out;
  out.ok.assign(files.size(), 1);
  out.read_ns.assign(files.size(), 0);
  for (const auto& f : files) out.total_bytes += f.size();
  out.bytes = std::move(files);
  return out;
}

decode_batch decode_images(const read_batch& read, thread_pool& pool, const image_limits& limits) {
  const std::size_t n = read.bytes.size();
  decode_batch out;
  out.images.resize(n);
  out.ok.assign(n, 0);
  out.decode_ns.assign(n, 0);
  std::vector<std::string> reasons(n);
  std::vector<std::unique_ptr<image_decoder>> decoders(pool.size());
  for (auto& d : decoders) d = std::make_unique<image_decoder>();
  const auto t0 = host_now_ns();
  pool.for_each(n, [&](std::size_t i, std::size_t worker) {
    if (!read.ok[i]) return;
    const auto start = host_now_ns();
    out.ok[i] = decode_one(*decoders[worker], read.bytes[i], limits, out.images[i], reasons[i]) ? 1 : 0;
    out.decode_ns[i] = host_now_ns() - start;
  });
  out.wall_ns = host_now_ns() - t0;
  out.errors = read.errors;
  for (std::size_t i = 0; i < n; ++i) {
    if (out.ok[i]) {
      ++out.good;
      out.input_bytes += read.bytes[i].size();
      out.output_bytes += out.images[i].pixels.size();
    } else {
      ++out.bad;
      if (read.ok[i]) out.errors.push_back({i, "decode", reasons[i]});
    }
  }
  sort_errors(out.errors);
  return out;
}

std::vector<std::size_t> default_thread_counts(std::size_t hardware) {
  hardware = std::max<std::size_t>(hardware, 1);
  std::vector<std::size_t> counts;
  for (std::size_t t = 1; t <= hardware; t *= 2) counts.push_back(t);
  if (counts.back() != hardware) counts.push_back(hardware);
  return counts;
}

decode_bench_result benchmark_decode(const read_batch& read, std::span<const std::size_t> thread_counts, int passes,
                                     const image_limits& limits) {
  if (thread_counts.empty()) throw usage_error("decode benchmark: give at least one thread count");
  for (auto t : thread_counts)
    if (t == 0) throw usage_error("decode benchmark: a thread count must be at least 1");
  if (passes < 1) throw usage_error("decode benchmark: passes must be at least 1");
  const std::size_t n = read.bytes.size();
  decode_bench_result result;
  result.images = n;

  // Warm-up pass on one thread: which images are good, their sizes; caches and page tables warm.
  {
    thread_pool pool(1);
    const auto batch = decode_images(read, pool, limits);
    result.good = batch.good;
    result.bad = batch.bad;
    result.input_bytes = batch.input_bytes;
    result.errors = batch.errors;
    for (const auto& img : batch.images) result.pixels += std::uint64_t{img.width} * img.height;
  }

  for (const std::size_t threads : thread_counts) {
    thread_pool pool(threads);
    std::vector<std::unique_ptr<image_decoder>> decoders(threads);
    for (auto& d : decoders) d = std::make_unique<image_decoder>();
    decode_bench_point point;
    point.threads = threads;
    for (int p = 0; p < passes; ++p) {
      const auto t0 = host_now_ns();
      pool.for_each(n, [&](std::size_t i, std::size_t worker) {
        if (!read.ok[i]) return;
        rgb_image img;  // allocated and freed per image, as the workload does
        std::string reason;
        decode_one(*decoders[worker], read.bytes[i], limits, img, reason);
      });
      point.pass_ns.push_back(host_now_ns() - t0);
    }
    auto sorted = point.pass_ns;
    std::sort(sorted.begin(), sorted.end());
    point.median_ns = sorted[(sorted.size() - 1) / 2];
    const double s = std::max<std::int64_t>(point.median_ns, 1) * 1e-9;
    point.images_per_s = static_cast<double>(result.good) / s;
    point.input_mb_per_s = static_cast<double>(result.input_bytes) / s / 1e6;
    point.megapixels_per_s = static_cast<double>(result.pixels) / s / 1e6;
    result.points.push_back(std::move(point));
  }
  const auto one = std::find_if(result.points.begin(), result.points.end(), [](const auto& p) { return p.threads == 1; });
  if (one != result.points.end() && one->images_per_s > 0)
    for (auto& p : result.points) p.speedup = p.images_per_s / one->images_per_s;
  return result;
}

}  // namespace itera::mm
