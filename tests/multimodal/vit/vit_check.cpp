// itera_vit_check: the vision encoder's cpu reference on a checkpoint folder or a preset, for
// comparing against another implementation (scripts/device_vit_check.py runs it against
// transformers). Two modes:
//
//   itera_vit_check --checkpoint DIR | --preset NAME [--shape SPEC] [--seed N]
//                   --pixels FILE --out DIR [--weights bf16|fp16|fp32] [--activations bf16|fp32]
//                   [--llm-hidden H] [--select patches|all] [--projector-seed N]
//     FILE holds raw little-endian float32 pixels, NCHW [N, C, S, S] (N from the file size). Writes
//     DIR/features.f32 [N, T, D] and DIR/image_tokens.f32 [N, T', H], raw float32, and prints one
//     JSON object describing them.
//
//   itera_vit_check --write DIR --preset NAME [--shape SPEC] [--seed N] [--dtype fp32|bf16|fp16]
//                   [--layout vision_model|llava]
//     Writes a checkpoint folder of random weights (config.json + model.safetensors).
//
// Exit codes as the itera CLI: 2 bad arguments, 5 unreadable input, 1 anything else.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"
#include "workloads/multimodal/vit_cpu.hpp"

namespace fs = std::filesystem;
using namespace itera;
using namespace itera::mm;

namespace {

struct options {
  std::string checkpoint, preset, shape = "preset", pixels, out, write, weights = "bf16", activations = "bf16";
  std::string dtype_name = "fp32", layout = "vision_model", select;
  std::uint64_t seed = 1, projector_seed = 1;
  std::int64_t llm_hidden = 0;
};

std::vector<float> read_f32(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(fmt::format("{}: cannot open", path.string()));
  const auto bytes = fs::file_size(path);
  if (bytes % 4 != 0) throw input_error(fmt::format("{}: {} bytes is not a whole number of float32", path.string(), bytes));
  std::vector<float> v(bytes / 4);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  if (!in) throw input_error(fmt::format("{}: read failed", path.string()));
  return v;
}

void write_f32(const fs::path& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  if (!out) throw input_error(fmt::format("{}: write failed", path.string()));
}

vit_config preset_config(const options& o) { return apply_vit_shape(vit_preset(o.preset), o.shape); }

int write_mode(const options& o) {
  if (o.preset.empty()) throw usage_error("--write needs --preset (the shape of the random weights)");
  const auto c = preset_config(o);
  const auto layout = o.layout == "llava" ? vit_layout::llava : vit_layout::vision_model;
  write_vit_checkpoint(o.write, random_vit_weights(c, dtype::fp32, o.seed), llm::parse_dtype(o.dtype_name), layout);
  nlohmann::ordered_json j = {{"written", o.write}, {"model", c.name}, {"layout", o.layout}};
  std::cout << j.dump() << '\n';
  return 0;
}

int run_mode(const options& o) {
  if (o.checkpoint.empty() == o.preset.empty()) throw usage_error("give one of --checkpoint DIR or --preset NAME");
  if (o.pixels.empty() || o.out.empty()) throw usage_error("--pixels FILE and --out DIR are needed");
  const dtype storage = llm::parse_dtype(o.weights), acts = llm::parse_dtype(o.activations);
  std::optional<vit_weights> w;
  bool has_projector = false;
  if (!o.checkpoint.empty()) {
    projector_shape fallback;
    if (o.llm_hidden > 0) fallback.llm_hidden = o.llm_hidden;
    if (!o.select.empty()) fallback.select = parse_select(o.select);
    const vit_checkpoint ck(o.checkpoint, fallback);
    has_projector = ck.has_projector();
    w = ck.load(storage, o.projector_seed);
  } else {
    auto c = preset_config(o);
    if (o.llm_hidden > 0) c.llm_hidden = o.llm_hidden;
    if (!o.select.empty()) c.select = parse_select(o.select);
    w = random_vit_weights(c, storage, o.seed);
  }
  const vit_config& c = w->config;

  pixel_tensor px;
  px.values = read_f32(o.pixels);
  const auto per_image = static_cast<std::size_t>(c.channels * c.image * c.image);
  if (px.values.empty() || px.values.size() % per_image != 0)
    throw usage_error(fmt::format("{}: {} float32 values are not whole images of {} x {} x {}", o.pixels,
                                  px.values.size(), c.channels, c.image, c.image));
  px.views = static_cast<std::uint32_t>(px.values.size() / per_image);
  px.channels = static_cast<std::uint32_t>(c.channels);
  px.height = px.width = static_cast<std::uint32_t>(c.image);

  const vit_reference ref(*w, acts);
  const auto start = std::chrono::steady_clock::now();
  const auto result = ref.run(px);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fs::create_directories(o.out);
  write_f32(fs::path(o.out) / "features.f32", result.features.values);
  write_f32(fs::path(o.out) / "image_tokens.f32", result.image_tokens.values);

  const auto params = count_params(c);
  const auto work = sum_work(vit_stages(c, storage, acts), 1, vit_part::encoder);
  nlohmann::ordered_json j;
  j["model"] = c.name;
  j["images"] = result.features.images;
  j["tokens"] = result.features.tokens;
  j["hidden"] = result.features.width;
  j["image_tokens"] = result.image_tokens.tokens;
  j["llm_hidden"] = result.image_tokens.width;
  j["layers"] = c.layers;
  j["has_projector"] = has_projector;
  j["params_encoder"] = params.encoder();
  j["params_projector"] = params.projector;
  j["encoder_gflop_per_image"] = work.matmul_flops / 1e9;
  j["weights"] = o.weights;
  j["activations"] = o.activations;
  j["seconds"] = seconds;
  std::cout << j.dump() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The vision encoder's cpu reference on a checkpoint or preset (itera tests)"};
  options o;
  app.add_option("--checkpoint", o.checkpoint, "Hugging Face folder: config.json + *.safetensors");
  app.add_option("--preset", o.preset, "random weights of this shape")->check(CLI::IsMember(vit_preset_names()));
  app.add_option("--shape", o.shape, "FIELD=VALUE;... over the preset");
  app.add_option("--seed", o.seed, "random weights' seed");
  app.add_option("--pixels", o.pixels, "raw float32 NCHW pixels");
  app.add_option("--out", o.out, "folder for features.f32 and image_tokens.f32");
  app.add_option("--weights", o.weights, "weight storage")->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_option("--activations", o.activations, "activation precision")->check(CLI::IsMember({"bf16", "fp32"}));
  app.add_option("--llm-hidden", o.llm_hidden, "projector width where the checkpoint does not give it");
  app.add_option("--select", o.select, "projector tokens: patches or all")->check(CLI::IsMember({"patches", "all"}));
  app.add_option("--projector-seed", o.projector_seed, "seed of a projector the checkpoint lacks");
  app.add_option("--write", o.write, "write a checkpoint of random weights into this folder");
  app.add_option("--dtype", o.dtype_name, "--write: tensor type")->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_option("--layout", o.layout, "--write: vision_model or llava")->check(CLI::IsMember({"vision_model", "llava"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help or the error
    return rc == 0 ? 0 : static_cast<int>(exit_code::usage);
  }
  try {
    return o.write.empty() ? run_mode(o) : write_mode(o);
  } catch (const usage_error& e) {
    std::cerr << "itera_vit_check: " << e.what() << '\n';
    return static_cast<int>(exit_code::usage);
  } catch (const input_error& e) {
    std::cerr << "itera_vit_check: " << e.what() << '\n';
    return static_cast<int>(exit_code::bad_input);
  } catch (const std::exception& e) {
    std::cerr << "itera_vit_check: " << e.what() << '\n';
    return static_cast<int>(exit_code::internal_error);
  }
}
