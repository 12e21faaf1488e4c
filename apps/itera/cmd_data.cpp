// itera data: the multimodal workload's images (docs/multimodal.md).
//   itera data images --out DIR ...     write a generated test set (images, manifest, requests)
//   itera data decode DIR ...           read + decode a set (generated or the user's own folder):
//                                       good/bad counts, errors by index, decode rate per thread count
//   itera data preprocess DIR ...       the CPU reference preprocessing of every image (optionally
//                                       written as .npy, for checking against another implementation)
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/itera/commands.hpp"
#include "itera/core/errors.hpp"
#include "itera/core/timer.hpp"
#include "workloads/multimodal/image_set.hpp"
#include "workloads/multimodal/loader.hpp"
#include "workloads/multimodal/preprocess.hpp"
#include "workloads/multimodal/requests.hpp"

namespace itera::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* default_sizes = "224,448,768,1024,2048,1280x720,720x1280";

std::vector<mm::image_format> parse_formats(const std::string& text) {
  std::vector<mm::image_format> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const auto item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    mm::image_format f;
    if (item == "jpeg" || item == "jpg") f = mm::image_format::jpeg;
    else if (item == "png") f = mm::image_format::png;
    else throw usage_error(fmt::format("--formats: '{}' is not jpeg or png; write e.g. --formats jpeg,png", item));
    if (std::find(out.begin(), out.end(), f) != out.end())
      throw usage_error(fmt::format("--formats: '{}' is given twice", item));
    out.push_back(f);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::size_t> parse_thread_counts(const std::string& text) {
  if (text.empty() || text == "auto") return mm::default_thread_counts(mm::thread_pool::hardware_threads());
  std::vector<std::size_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const auto item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::size_t used = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 1 || v > 1024)
      throw usage_error(fmt::format("--threads: '{}' is not a thread count from 1 to 1024; write e.g. --threads 1,2,4 "
                                    "or --threads auto",
                                    item));
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

mm::image_limits make_limits(std::uint32_t max_side, std::uint64_t max_pixels) {
  if (max_side < 1) throw usage_error("--max-side must be at least 1");
  if (max_pixels < 1) throw usage_error("--max-pixels must be at least 1");
  return {max_side, max_pixels};
}

void print_errors(const std::vector<mm::image_error>& errors) {
  for (const auto& e : errors) std::cout << fmt::format("  image {} ({}): {}\n", e.index, e.stage, e.reason);
}

json errors_json(const std::vector<mm::image_error>& errors) {
  json out = json::array();
  for (const auto& e : errors) out.push_back({{"index", e.index}, {"stage", e.stage}, {"reason", e.reason}});
  return out;
}

// numpy .npy, version 1.0: float32 ('<f4') or bfloat16 stored as uint16 ('<u2').
void write_npy(const fs::path& path, const std::string& descr, const std::vector<std::size_t>& shape,
               const void* data, std::size_t bytes) {
  std::string dims;
  for (std::size_t i = 0; i < shape.size(); ++i) dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const auto len = static_cast<std::uint16_t>(header.size());
  f.write(reinterpret_cast<const char*>(magic), 8);
  const unsigned char len_le[2] = {static_cast<unsigned char>(len & 0xFF), static_cast<unsigned char>(len >> 8)};
  f.write(reinterpret_cast<const char*>(len_le), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  f.close();
  if (!f) throw input_error(fmt::format("cannot write {} (disk full or no permission?)", path.string()));
}

struct images_opts {
  std::string out;
  std::string sizes = default_sizes;
  std::string formats = "jpeg,png";
  mm::image_set_spec spec;
};

int run_images(const images_opts& o) {
  auto spec = o.spec;
  spec.sizes = mm::parse_sizes(o.sizes);
  spec.formats = parse_formats(o.formats);
  const auto t0 = host_now_ns();
  const auto summary = mm::write_image_set(o.out, spec);
  const double seconds = (host_now_ns() - t0) * 1e-9;
  std::cout << fmt::format("wrote {} images ({:.1f} MB) and {} requests to {} in {:.1f} s\n", summary.images,
                           summary.bytes / 1e6, summary.requests, o.out, seconds);
  std::cout << fmt::format("  manifest: {}\n  requests: {}\n", summary.manifest.string(),
                           summary.requests_path.string());
  return static_cast<int>(exit_code::ok);
}

struct decode_opts {
  std::string dir;
  std::string threads = "auto";
  int passes = 3;
  std::uint32_t max_side = mm::image_limits{}.max_side;
  std::uint64_t max_pixels = mm::image_limits{}.max_pixels;
  std::string format = "md";
};

int run_decode(const decode_opts& o) {
  const auto counts = parse_thread_counts(o.threads);
  const auto limits = make_limits(o.max_side, o.max_pixels);
  const auto set = mm::list_images(o.dir);
  mm::thread_pool io_pool(std::min<std::size_t>(4, mm::thread_pool::hardware_threads()));
  const auto read = mm::read_images(set, &io_pool);
  const auto bench = mm::benchmark_decode(read, counts, o.passes, limits);
  if (o.format == "json") {
    json points = json::array();
    for (const auto& p : bench.points)
      points.push_back({{"threads", p.threads},
                        {"pass_ns", p.pass_ns},
                        {"median_ns", p.median_ns},
                        {"images_per_s", p.images_per_s},
                        {"input_mb_per_s", p.input_mb_per_s},
                        {"megapixels_per_s", p.megapixels_per_s},
                        {"speedup", p.speedup}});
    const json out{{"images", bench.images},
                   {"good", bench.good},
                   {"bad", bench.bad},
                   {"source", set.from_manifest ? "manifest" : "folder"},
                   {"read", {{"bytes", read.total_bytes}, {"wall_ns", read.wall_ns}}},
                   {"input_bytes", bench.input_bytes},
                   {"pixels", bench.pixels},
                   {"hardware_threads", mm::thread_pool::hardware_threads()},
                   {"errors", errors_json(bench.errors)},
                   {"points", points}};
    std::cout << out.dump() << "\n";
    return static_cast<int>(exit_code::ok);
  }
  std::cout << fmt::format("images: {} ({} good, {} bad){}\n", bench.images, bench.good, bench.bad,
                           set.from_manifest ? "" : fmt::format(", {} other files left out", set.skipped_files));
  std::cout << fmt::format("read: {:.1f} MB in {:.1f} ms\n", read.total_bytes / 1e6, read.wall_ns / 1e6);
  std::cout << fmt::format("decode: {:.1f} MB compressed -> {:.1f} Mpx, {} passes per thread count, median pass "
                           "(hardware threads: {})\n\n",
                           bench.input_bytes / 1e6, bench.pixels / 1e6, o.passes, mm::thread_pool::hardware_threads());
  std::cout << "| threads | images/s | MB/s in | Mpx/s | speedup | median pass ms |\n";
  std::cout << "|--------:|---------:|--------:|------:|--------:|---------------:|\n";
  for (const auto& p : bench.points)
    std::cout << fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.2f} |\n", p.threads, p.images_per_s,
                             p.input_mb_per_s, p.megapixels_per_s, p.speedup, p.median_ns / 1e6);
  if (!bench.errors.empty()) {
    std::cout << fmt::format("\n{} images failed (by index; the others were decoded):\n", bench.errors.size());
    print_errors(bench.errors);
  }
  return static_cast<int>(exit_code::ok);
}

struct preprocess_opts {
  std::string dir;
  std::string mode = "crop";
  mm::preprocess_config config;
  std::string out;
  std::string dtype = "f32";
  std::size_t threads = 0;
  bool patches = false;
};

int run_preprocess(const preprocess_opts& o) {
  auto config = o.config;
  config.mode = mm::parse_resize_mode(o.mode);
  mm::validate(config);
  if (!o.out.empty()) {
    std::error_code ec;
    if (fs::exists(o.out, ec) && !fs::is_empty(o.out, ec))
      throw usage_error(fmt::format("--out {} is not empty: name a new or empty folder", o.out));
    fs::create_directories(o.out, ec);
    if (ec) throw input_error(fmt::format("cannot create {}: {}", o.out, ec.message()));
  }
  const auto set = mm::list_images(o.dir);
  mm::thread_pool pool(o.threads ? o.threads : mm::thread_pool::hardware_threads());
  const auto read = mm::read_images(set, &pool);
  const auto decoded = mm::decode_images(read, pool);
  const std::size_t n = set.entries.size();
  std::vector<std::int64_t> ns(n, 0);
  std::vector<std::uint32_t> views(n, 0);
  const auto t0 = host_now_ns();
  pool.for_each(n, [&](std::size_t i, std::size_t) {
    if (!decoded.ok[i]) return;
    const auto start = host_now_ns();
    const auto tensor = mm::preprocess(decoded.images[i], config);
    ns[i] = host_now_ns() - start;
    views[i] = tensor.views;
    if (o.out.empty()) return;
    const auto s = std::size_t{config.image_size};
    const auto p = std::size_t{config.patch_size};
    const auto values = o.patches ? mm::patchify_whole(tensor, config.patch_size) : tensor.values;
    const std::vector<std::size_t> shape =
        o.patches ? std::vector<std::size_t>{tensor.views, (s / p) * (s / p), 3 * p * p}
                  : std::vector<std::size_t>{tensor.views, 3, s, s};
    const auto path = fs::path(o.out) / fmt::format("{:06}.npy", i);
    if (o.dtype == "bf16") {
      const auto half = mm::to_bf16(values);
      write_npy(path, "<u2", shape, half.data(), half.size() * sizeof(std::uint16_t));
    } else {
      write_npy(path, "<f4", shape, values.data(), values.size() * sizeof(float));
    }
  });
  const auto wall = host_now_ns() - t0;
  std::size_t total_views = 0;
  for (auto v : views) total_views += v;
  std::cout << fmt::format("images: {} ({} good, {} bad); mode {} at {}x{}, patch {}: {} views in {:.1f} ms on {} "
                           "threads\n",
                           n, decoded.good, decoded.bad, mm::resize_mode_name(config.mode), config.image_size,
                           config.image_size, config.patch_size, total_views, wall / 1e6, pool.size());
  std::cout << "| index | size | views | ms |\n|------:|-----:|------:|---:|\n";
  for (std::size_t i = 0; i < n; ++i)
    if (decoded.ok[i])
      std::cout << fmt::format("| {} | {}x{} | {} | {:.2f} |\n", i, decoded.images[i].width, decoded.images[i].height,
                               views[i], ns[i] / 1e6);
  if (!decoded.errors.empty()) {
    std::cout << fmt::format("\n{} images failed (by index):\n", decoded.errors.size());
    print_errors(decoded.errors);
  }
  return static_cast<int>(exit_code::ok);
}

}  // namespace

command_fn add_data(CLI::App& app) {
  auto* data = app.add_subcommand("data", "The multimodal workload's images: generate a test set, decode, preprocess");
  data->require_subcommand(1);

  auto io = std::make_shared<images_opts>();
  auto* images = data->add_subcommand("images", "Write a test set: photo-like JPEG and PNG images, manifest, requests");
  images->add_option("--out", io->out, "new or empty folder to write the set into")->required();
  images->add_option("--seed", io->spec.seed, "seed of the images and requests")->capture_default_str();
  images->add_option("--sizes", io->sizes, "N (square) or WxH, comma-separated")->capture_default_str();
  images->add_option("--count", io->spec.count, "images per size and format")->capture_default_str();
  images->add_option("--formats", io->formats, "jpeg, png or both")->capture_default_str();
  images->add_option("--jpeg-quality", io->spec.jpeg_quality, "JPEG quality 1..100")->capture_default_str();
  images->add_option("--requests", io->spec.requests, "requests to write into requests.jsonl")->capture_default_str();
  images->add_option("--max-images-per-request", io->spec.max_images_per_request,
                     "each request has 1..this many images")->capture_default_str();
  images->add_option("--prompt-tokens", io->spec.prompt_tokens, "prompt length of every request")->capture_default_str();
  images->add_option("--output-tokens", io->spec.output_tokens, "output length of every request (fixed)")
      ->capture_default_str();
  images->add_option("--threads", io->spec.threads, "threads generating images (0: all hardware threads)")
      ->capture_default_str();

  auto dopt = std::make_shared<decode_opts>();
  auto* decode = data->add_subcommand("decode", "Read and decode a set on the CPU: good/bad counts, decode rate per thread count");
  decode->add_option("dir", dopt->dir, "a generated set or a folder of your own images")->required();
  decode->add_option("--threads", dopt->threads, "thread counts, e.g. 1,2,4 (auto: 1, 2, 4, ... up to the hardware threads)")
      ->capture_default_str();
  decode->add_option("--passes", dopt->passes, "timed passes over the set per thread count")->capture_default_str();
  decode->add_option("--max-side", dopt->max_side, "largest accepted image side, pixels")->capture_default_str();
  decode->add_option("--max-pixels", dopt->max_pixels, "largest accepted image area, pixels")->capture_default_str();
  decode->add_option("--format", dopt->format, "md or json")->check(CLI::IsMember({"md", "json"}))->capture_default_str();

  auto popt = std::make_shared<preprocess_opts>();
  auto* prep = data->add_subcommand("preprocess", "The CPU reference preprocessing (resize, normalise, patchify) of every image");
  prep->add_option("dir", popt->dir, "a generated set or a folder of your own images")->required();
  prep->add_option("--mode", popt->mode, "crop (CLIP: shortest side + centre crop) or tiles (InternVL grid + thumbnail)")
      ->capture_default_str();
  prep->add_option("--size", popt->config.image_size, "encoder input side S")->capture_default_str();
  prep->add_option("--patch", popt->config.patch_size, "ViT patch side P")->capture_default_str();
  prep->add_option("--max-tiles", popt->config.max_tiles, "tiles mode: most tiles per image")->capture_default_str();
  prep->add_option("--out", popt->out, "write NNNNNN.npy per image into this new or empty folder");
  prep->add_option("--dtype", popt->dtype, "f32 or bf16 (.npy uint16 holding bf16 bits)")
      ->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  prep->add_flag("--patches", popt->patches, "write [N, patches, 3*P*P] instead of NCHW [N, 3, S, S]");
  prep->add_option("--threads", popt->threads, "threads (0: all hardware threads)")->capture_default_str();

  return [=]() {
    if (images->parsed()) return run_images(*io);
    if (decode->parsed()) return run_decode(*dopt);
    if (prep->parsed()) return run_preprocess(*popt);
    throw usage_error("itera data: name a subcommand: images, decode or preprocess");
  };
}

}  // namespace itera::cli
