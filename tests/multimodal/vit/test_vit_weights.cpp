// Vision encoder weights: random values, tiny checkpoints written and read back in every layout
// and file type, and every error a checkpoint can give.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "vit_test_support.hpp"
#include "workloads/llm/weights.hpp"
#include "workloads/multimodal/vit_cpu.hpp"
#include "workloads/multimodal/vit_weights.hpp"

namespace itera::mm {
namespace {

namespace fs = std::filesystem;
using test::expect_input_error;
using test::expect_usage_error;
using test::temp_dir;

void expect_same_weights(const vit_weights& a, const vit_weights& b) {
  ASSERT_EQ(a.config.tokens(), b.config.tokens());
  for (const auto& spec : vit_tensor_specs(a.config)) EXPECT_EQ(a.tensor(spec), b.tensor(spec)) << spec.name;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

void write_json(const fs::path& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(2); }

// Writes a checkpoint of `c` and edits its config.json with `edit`.
template <class F>
fs::path edited(const temp_dir& dir, const vit_config& c, F edit, vit_layout layout = vit_layout::vision_model) {
  const auto folder = dir.path() / "ckpt";
  fs::remove_all(folder);
  write_vit_checkpoint(folder, random_vit_weights(c, dtype::bf16, 1), dtype::bf16, layout);
  auto j = read_json(folder / "config.json");
  edit(j);
  write_json(folder / "config.json", j);
  return folder;
}

TEST(VitWeights, SpecsFollowTransformersNames) {
  const auto specs = vit_tensor_specs(vit_preset("clip-vit-large-patch14"));
  ASSERT_FALSE(specs.empty());
  EXPECT_EQ(specs[0].name, "vision_model.embeddings.class_embedding");
  EXPECT_EQ(specs[1].name, "vision_model.embeddings.patch_embedding.weight");
  EXPECT_EQ(specs[1].shape, (std::vector<std::int64_t>{1024, 3, 14, 14}));
  EXPECT_EQ(specs[2].name, "vision_model.embeddings.position_embedding.weight");
  EXPECT_EQ(specs[2].shape, (std::vector<std::int64_t>{257, 1024}));
  EXPECT_EQ(specs[3].name, "vision_model.pre_layrnorm.weight");
  EXPECT_EQ(specs[5].name, "vision_model.encoder.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(specs.back().name, "multi_modal_projector.linear_2.bias");
  std::int64_t total = 0, projector = 0;
  for (const auto& s : specs) (s.projector() ? projector : total) += s.elements();
  const auto p = count_params(vit_preset("clip-vit-large-patch14"));
  EXPECT_EQ(total, p.encoder());
  EXPECT_EQ(projector, p.projector);

  const auto so = vit_tensor_specs(vit_preset("siglip-so400m-patch14-384"));
  EXPECT_EQ(so[0].name, "vision_model.embeddings.patch_embedding.weight");
  EXPECT_EQ(so[1].name, "vision_model.embeddings.patch_embedding.bias");
  EXPECT_EQ(so[2].shape, (std::vector<std::int64_t>{729, 1152}));
  EXPECT_EQ(so[so.size() - 6].name, "vision_model.post_layernorm.weight");
}

TEST(VitWeights, RandomWeightsAreSeededBf16AndScaled) {
  const auto c = vit_preset("tiny");
  const auto a = random_vit_weights(c, dtype::bf16, 5);
  expect_same_weights(a, random_vit_weights(c, dtype::bf16, 5));
  EXPECT_NE(a.layers[0].fc1_weight, random_vit_weights(c, dtype::bf16, 6).layers[0].fc1_weight);
  // bf16 storage: the fp32 draws rounded, nothing else.
  const auto f = random_vit_weights(c, dtype::fp32, 5);
  for (const auto& spec : vit_tensor_specs(c)) {
    auto rounded = f.tensor(spec);
    llm::round_to_storage(dtype::bf16, rounded);
    EXPECT_EQ(rounded, a.tensor(spec)) << spec.name;
  }
  // Scales: matrices std 1/sqrt(fan in), LayerNorm weights in [0.9, 1.1), biases std 0.02.
  const auto stats = [](const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (const float x : v) s += x, s2 += double(x) * x;
    const double n = static_cast<double>(v.size());
    return std::pair{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  // ViT-L/14's widths, one layer and a narrower projector: large tensors, modest memory.
  const auto big = random_vit_weights(apply_vit_shape(vit_preset("clip-vit-large-patch14"), "layers=1;llm_hidden=256"),
                                      dtype::bf16, 1);
  EXPECT_NEAR(stats(big.layers[0].fc1_weight).second, 1.0 / 32, 0.02 / 32);
  EXPECT_NEAR(stats(big.layers[0].fc2_weight).second, 1.0 / 64, 0.02 / 64);
  EXPECT_NEAR(stats(big.patch_weight).second, 1.0 / std::sqrt(588.0), 0.02 / std::sqrt(588.0));
  EXPECT_NEAR(stats(big.position).second, 1.0 / 32, 0.02 / 32);
  EXPECT_NEAR(stats(big.layers[0].fc1_bias).second, 0.02, 0.002);
  const auto ln = big.layers[0].norm1_weight;
  // [0.9, 1.1) before rounding; bf16's step near 1 is 2^-7.
  EXPECT_GE(*std::min_element(ln.begin(), ln.end()), 0.9f - 0.004f);
  EXPECT_LE(*std::max_element(ln.begin(), ln.end()), 1.1f + 0.004f);
  EXPECT_NEAR(stats(ln).first, 1.0, 0.01);
  // Fused q|k|v: q's rows, then k's, then v's.
  const auto qkv = fuse_qkv(a.layers[1]);
  ASSERT_EQ(qkv.weight.size(), 3 * a.layers[1].q_weight.size());
  EXPECT_TRUE(std::equal(a.layers[1].k_weight.begin(), a.layers[1].k_weight.end(),
                         qkv.weight.begin() + static_cast<std::ptrdiff_t>(a.layers[1].q_weight.size())));
  EXPECT_EQ(qkv.bias[2 * 64], a.layers[1].v_bias[0]);
  expect_usage_error([&] { (void)zero_vit_weights(c, dtype::fp8_e4m3); }, {"bf16, fp16 or fp32"});
}

TEST(VitCheckpoint, WrittenAndReadBackInEveryFileType) {
  temp_dir dir;
  for (const char* preset : {"tiny", "tiny-siglip"}) {
    const auto c = vit_preset(preset);
    const auto fp32 = random_vit_weights(c, dtype::fp32, 3);
    const auto bf16 = random_vit_weights(c, dtype::bf16, 3);
    for (const dtype file : {dtype::fp32, dtype::bf16, dtype::fp16}) {
      const auto folder = dir.path() / fmt::format("{}-{}", preset, llm::dtype_name(file));
      write_vit_checkpoint(folder, fp32, file);
      const vit_checkpoint ck(folder, {4096, c.select});  // a vision model's config does not say select
      EXPECT_TRUE(ck.has_projector());
      EXPECT_EQ(ck.vision_prefix(), "");
      auto expect = c;
      expect.name = folder.filename().string();
      EXPECT_EQ(ck.config(), expect) << preset;
      // Loaded into bf16: the file's values (exact for fp32 and bf16 files) rounded to bf16.
      const auto loaded = ck.load(dtype::bf16);
      if (file != dtype::fp16) {
        expect_same_weights(loaded, bf16);
      } else {
        for (const auto& spec : vit_tensor_specs(c)) {
          auto v = fp32.tensor(spec);
          llm::round_to_storage(dtype::fp16, v);
          llm::round_to_storage(dtype::bf16, v);
          EXPECT_EQ(loaded.tensor(spec), v) << spec.name;
        }
      }
      if (file == dtype::fp32) expect_same_weights(ck.load(dtype::fp32), fp32);
    }
  }
}

TEST(VitCheckpoint, LoadedWeightsGiveTheSameFeatures) {
  temp_dir dir;
  const auto w = random_vit_weights(vit_preset("tiny"), dtype::bf16, 12);
  write_vit_checkpoint(dir.path() / "m", w, dtype::bf16);
  const auto loaded = vit_checkpoint(dir.path() / "m").load(dtype::bf16);
  const auto px = test::random_pixels(2, 3, 16, 3);
  EXPECT_EQ(vit_reference(loaded, dtype::bf16).run(px).image_tokens.values,
            vit_reference(w, dtype::bf16).run(px).image_tokens.values);
}

TEST(VitCheckpoint, VisionModelWithoutProjectorTakesARandomOne) {
  temp_dir dir;
  const auto c = vit_preset("tiny");
  const auto w = random_vit_weights(c, dtype::bf16, 4);
  write_vit_checkpoint(dir.path() / "m", w, dtype::bf16, vit_layout::vision_model, false);
  const vit_checkpoint ck(dir.path() / "m", {48, feature_select::all});
  EXPECT_FALSE(ck.has_projector());
  EXPECT_EQ(ck.config().llm_hidden, 48);
  EXPECT_EQ(ck.config().select, feature_select::all);
  const auto loaded = ck.load(dtype::bf16, 77);
  EXPECT_EQ(loaded.layers[1].fc2_weight, w.layers[1].fc2_weight);
  for (const auto& spec : vit_tensor_specs(ck.config())) {
    if (!spec.projector()) continue;
    EXPECT_EQ(loaded.tensor(spec), random_vit_tensor(spec, ck.config(), dtype::bf16, 77)) << spec.name;
  }
}

TEST(VitCheckpoint, VisionModelWithProjectorTakesItsWidth) {
  temp_dir dir;
  auto c = vit_preset("tiny");
  c.llm_hidden = 40;
  const auto w = random_vit_weights(c, dtype::bf16, 4);
  write_vit_checkpoint(dir.path() / "m", w, dtype::bf16);
  const vit_checkpoint ck(dir.path() / "m", {4096, feature_select::patches});
  EXPECT_EQ(ck.config().llm_hidden, 40);
  EXPECT_EQ(ck.load(dtype::bf16).projector_fc2_weight, w.projector_fc2_weight);
}

TEST(VitCheckpoint, LlavaLayoutRoundTrip) {
  temp_dir dir;
  for (const char* preset : {"tiny", "tiny-siglip"}) {
    auto c = vit_preset(preset);
    if (!c.class_token) c.norm = vit_norm::none;  // a hidden state of the encoder: no post LayerNorm
    const auto w = random_vit_weights(c, dtype::bf16, 8);
    const auto folder = dir.path() / preset;
    write_vit_checkpoint(folder, w, dtype::bf16, vit_layout::llava);
    const auto j = read_json(folder / "config.json");
    EXPECT_EQ(j["model_type"], "llava");
    EXPECT_EQ(j["text_config"]["hidden_size"], c.llm_hidden);
    const vit_checkpoint ck(folder);
    EXPECT_EQ(ck.vision_prefix(), "vision_tower.");
    EXPECT_TRUE(ck.has_projector());
    auto expect = c;
    expect.name = preset;
    EXPECT_EQ(ck.config(), expect);
    expect_same_weights(ck.load(dtype::bf16), w);
  }
}

// What real checkpoints look like: a CLIPModel (text tower beside, vision_config nested), a
// SiglipVisionModel with its pooling head, LLaVA reading the second-to-last layer.
TEST(VitCheckpoint, ForeignTensorsAreLeftAlone) {
  temp_dir dir;
  const auto c = vit_preset("tiny");
  const auto w = random_vit_weights(c, dtype::bf16, 2);
  {
    const auto folder = dir.path() / "clip";
    write_vit_checkpoint(folder, w, dtype::fp32, vit_layout::vision_model, false);
    auto vision = read_json(folder / "config.json");
    write_json(folder / "config.json", {{"model_type", "clip"}, {"vision_config", vision}, {"text_config", {}}});
    const std::vector<float> text(32, 0.5f), post(64, 1.0f);
    const llm::safetensors_tensor_view extra[] = {{"text_model.embeddings.token_embedding.weight", {4, 8}, text},
                                                   {"vision_model.post_layernorm.weight", {64}, post},
                                                   {"visual_projection.weight", {1, 32}, text}};
    llm::write_safetensors(folder / "model-extra.safetensors", extra, dtype::fp32);
    const vit_checkpoint ck(folder, {96, feature_select::patches});
    EXPECT_EQ(ck.config().tokens(), c.tokens());
    EXPECT_EQ(ck.load(dtype::bf16).layers[0].q_weight, w.layers[0].q_weight);
  }
  {
    const auto folder = dir.path() / "siglip";
    const auto s = random_vit_weights(vit_preset("tiny-siglip"), dtype::bf16, 2);
    write_vit_checkpoint(folder, s, dtype::bf16, vit_layout::vision_model, false);
    const std::vector<float> probe(64, 0.1f);
    const llm::safetensors_tensor_view head[] = {{"vision_model.head.probe", {1, 1, 64}, probe}};
    llm::write_safetensors(folder / "head.safetensors", head, dtype::bf16);
    EXPECT_EQ(vit_checkpoint(folder).load(dtype::bf16).post_norm_bias, s.post_norm_bias);
  }
  {
    const auto folder = dir.path() / "llava";
    write_vit_checkpoint(folder, w, dtype::bf16, vit_layout::llava);
    auto j = read_json(folder / "config.json");
    j["vision_feature_layer"] = -2;
    j["vision_feature_select_strategy"] = "default";
    j["vision_config"].erase("model_type");  // transformers' LlavaConfig takes it as CLIP's
    write_json(folder / "config.json", j);
    const vit_checkpoint ck(folder);
    EXPECT_EQ(ck.config().layers, 1);  // hidden_states[-2] of 2 layers: the output of layer 0
    EXPECT_EQ(ck.config().select, feature_select::patches);
    const auto loaded = ck.load(dtype::bf16);
    ASSERT_EQ(loaded.layers.size(), 1u);
    EXPECT_EQ(loaded.layers[0].fc2_bias, w.layers[0].fc2_bias);
    j["vision_feature_layer"] = 2;  // a non-negative index counts layers run
    write_json(folder / "config.json", j);
    EXPECT_EQ(vit_checkpoint(folder).config().layers, 2);
  }
}

TEST(VitCheckpoint, ConfigDefaultsAreTransformers) {
  temp_dir dir;
  write_json(dir.path() / "config.json", {{"model_type", "clip_vision_model"}});
  const auto clip = read_vit_hf_config(dir.path() / "config.json");
  EXPECT_EQ(clip.hidden, 768);
  EXPECT_EQ(clip.layers, 12);
  EXPECT_EQ(clip.patch, 32);
  EXPECT_EQ(clip.activation, vit_activation::quick_gelu);
  EXPECT_DOUBLE_EQ(clip.layer_norm_eps, 1e-5);
  write_json(dir.path() / "config.json", {{"model_type", "siglip_vision_model"}, {"hidden_act", "gelu_new"}});
  const auto siglip = read_vit_hf_config(dir.path() / "config.json", {2048, feature_select::all});
  EXPECT_EQ(siglip.patch, 16);
  EXPECT_EQ(siglip.activation, vit_activation::gelu_tanh);
  EXPECT_DOUBLE_EQ(siglip.layer_norm_eps, 1e-6);
  EXPECT_FALSE(siglip.class_token);
  EXPECT_EQ(siglip.llm_hidden, 2048);
  write_json(dir.path() / "config.json", {{"model_type", "llava"}, {"vision_config", nlohmann::json::object()}});
  const auto llava = read_vit_hf_config(dir.path() / "config.json");
  EXPECT_EQ(llava.layers, 11);         // vision_feature_layer -2 of 12
  EXPECT_EQ(llava.llm_hidden, 4096);   // LlamaConfig's hidden_size
  EXPECT_EQ(llava.norm, vit_norm::pre);
}

TEST(VitCheckpoint, EveryConfigErrorNamesTheField) {
  temp_dir dir;
  const auto c = vit_preset("tiny");
  const auto cfg = [&](auto edit) { return edited(dir, c, edit) / "config.json"; };
  expect_input_error([&] { (void)vit_checkpoint(dir.path() / "absent"); }, {"absent", "not a checkpoint folder"});
  fs::create_directories(dir.path() / "empty");
  expect_input_error([&] { (void)vit_checkpoint(dir.path() / "empty"); }, {"config.json", "cannot open"});
  std::ofstream(dir.path() / "empty" / "config.json") << "{ not json";
  expect_input_error([&] { (void)vit_checkpoint(dir.path() / "empty"); }, {"not valid JSON"});
  std::ofstream(dir.path() / "empty" / "config.json") << "[1, 2]";
  expect_input_error([&] { (void)vit_checkpoint(dir.path() / "empty"); }, {"not a JSON object"});

  const auto read = [](const fs::path& p) { return [p] { (void)read_vit_hf_config(p); }; };
  expect_input_error(read(cfg([](auto& j) { j.erase("model_type"); })), {"field 'model_type' is missing"});
  expect_input_error(read(cfg([](auto& j) { j["model_type"] = "llama"; })),
                     {"model_type 'llama' is not a vision encoder", "clip_vision_model"});
  expect_input_error(read(cfg([](auto& j) { j["hidden_act"] = "relu"; })),
                     {"field 'hidden_act'", "activation 'relu' is not supported"});
  expect_input_error(read(cfg([](auto& j) { j["hidden_size"] = "64"; })),
                     {"field 'hidden_size' must be a whole number, found \"64\""});
  expect_input_error(read(cfg([](auto& j) { j["layer_norm_eps"] = "small"; })),
                     {"field 'layer_norm_eps' must be a number"});
  expect_input_error(read(cfg([](auto& j) { j["image_size"] = 2; })),
                     {"config.json", "image 2 is smaller than patch 4"});
  expect_input_error(read(cfg([](auto& j) { j["num_attention_heads"] = 6; })),
                     {"config.json", "hidden 64 is not divisible by heads 6"});
  expect_input_error(read(cfg([](auto& j) { j["model_type"] = "clip"; })), {"field 'vision_config' is missing"});
  expect_input_error(read(cfg([](auto& j) { j = {{"model_type", "siglip"}, {"vision_config", 3}}; })),
                     {"field 'vision_config' must be an object"});
  expect_input_error(read(cfg([](auto& j) { j = {{"model_type", "llava"}, {"vision_config", {{"model_type", "vit"}}}}; })),
                     {"vision_config.model_type 'vit' is not a vision encoder"});
  expect_input_error(
      read(cfg([](auto& j) { j = {{"model_type", "llava"}, {"vision_config", {{"hidden_size", 1.5}}}}; })),
      {"field 'vision_config.hidden_size' must be a whole number"});

  const auto llava = [&](auto edit) { return edited(dir, c, edit, vit_layout::llava) / "config.json"; };
  expect_input_error(read(llava([](auto& j) { j["projector_hidden_act"] = "relu"; })),
                     {"'projector_hidden_act' is 'relu'", "gelu"});
  expect_input_error(read(llava([](auto& j) { j["multimodal_projector_bias"] = false; })),
                     {"'multimodal_projector_bias' is false"});
  expect_input_error(read(llava([](auto& j) { j["vision_feature_layer"] = {-2, -5}; })),
                     {"'vision_feature_layer' is [-2,-5]", "not a list"});
  expect_input_error(read(llava([](auto& j) { j["vision_feature_layer"] = -4; })),
                     {"'vision_feature_layer' -4 selects hidden state -1 of 0..2"});
  expect_input_error(read(llava([](auto& j) { j["vision_feature_layer"] = 0; })),
                     {"'vision_feature_layer' 0 selects hidden state 0 of 0..2"});
  expect_input_error(read(llava([](auto& j) { j["vision_feature_select_strategy"] = "cls"; })),
                     {"'vision_feature_select_strategy' is 'cls'", "default or full"});
  expect_input_error(read(llava([](auto& j) { j["text_config"]["hidden_size"] = "wide"; })),
                     {"field 'text_config.hidden_size' must be a whole number"});
  auto siglip = vit_preset("tiny-siglip");
  siglip.norm = vit_norm::none;
  expect_input_error(read(edited(
                         dir, siglip, [](auto& j) { j["vision_feature_select_strategy"] = "default"; },
                         vit_layout::llava) /
                     "config.json"),
                     {"'default'", "SigLIP encoder has none", "'full'"});
}

TEST(VitCheckpoint, EveryTensorErrorNamesTheTensorAndShape) {
  temp_dir dir;
  const auto c = vit_preset("tiny");
  const auto w = random_vit_weights(c, dtype::bf16, 1);
  const auto folder = dir.path() / "m";
  const auto rewrite = [&](const std::function<void(std::vector<llm::safetensors_tensor_view>&)>& edit,
                           vit_layout layout = vit_layout::vision_model) {
    fs::remove_all(folder);
    write_vit_checkpoint(folder, w, dtype::bf16, layout);
    std::vector<llm::safetensors_tensor_view> views;
    for (const auto& spec : vit_tensor_specs(c))
      views.push_back({(layout == vit_layout::llava && !spec.projector() ? "vision_tower." : "") + spec.name,
                       spec.shape, w.tensor(spec)});
    edit(views);
    llm::write_safetensors(folder / "model.safetensors", views, dtype::bf16);
  };
  const auto open = [&] { (void)vit_checkpoint(folder); };
  const auto drop = [](std::string_view name) {
    return [name](std::vector<llm::safetensors_tensor_view>& v) {
      std::erase_if(v, [&](const auto& t) { return t.name == name; });
    };
  };

  rewrite(drop("vision_model.encoder.layers.1.mlp.fc2.bias"));
  expect_input_error(open, {"tensor 'vision_model.encoder.layers.1.mlp.fc2.bias' is missing", "expected shape [64]",
                            "model.safetensors"});
  rewrite(drop("vision_model.embeddings.patch_embedding.weight"));
  expect_input_error(open, {"no tensor named 'vision_model.embeddings.patch_embedding.weight'", "CLIPVisionModel"});
  rewrite([](auto& v) { v[1].shape = {64, 48}; });  // the patch weight flattened: transformers keeps it 4-D
  expect_input_error(open, {"tensor 'vision_model.embeddings.patch_embedding.weight' has shape [64, 48], expected "
                            "[64, 3, 4, 4] from config.json"});
  std::vector<float> wide(64 * 65);
  rewrite([&](auto& v) {
    for (auto& t : v)
      if (t.name == "vision_model.encoder.layers.0.self_attn.k_proj.weight") t = {t.name, {64, 65}, wide};
  });
  expect_input_error(open, {"'vision_model.encoder.layers.0.self_attn.k_proj.weight' has shape [64, 65], expected "
                            "[64, 64]"});
  std::vector<float> proj(40 * 40);
  rewrite([&](auto& v) {
    for (auto& t : v)
      if (t.name == "multi_modal_projector.linear_2.weight") t = {t.name, {40, 40}, proj};
  });
  expect_input_error(open, {"'multi_modal_projector.linear_2.weight' has shape [40, 40], expected [96, 96]"});
  rewrite(drop("multi_modal_projector.linear_1.weight"), vit_layout::llava);
  expect_input_error(open, {"tensor 'multi_modal_projector.linear_1.weight' is missing", "expected shape [96, 64]",
                            "LLaVA"});
  rewrite([](auto& v) {
    for (auto& t : v) t.name = "vision_tower." + t.name;
    auto copy = v[1];  // the patch weight, renamed under a second prefix
    copy.name = "image_tower." + copy.name.substr(std::string_view("vision_tower.").size());
    v.push_back(copy);
  });
  expect_input_error(open, {"several vision towers"});

  // A tensor stored twice, in two files.
  rewrite([](auto&) {});
  const std::vector<float> bias(64, 0.0f);
  const llm::safetensors_tensor_view dup[] = {{"vision_model.encoder.layers.0.layer_norm1.bias", {64}, bias}};
  llm::write_safetensors(folder / "more.safetensors", dup, dtype::bf16);
  expect_input_error(open, {"'vision_model.encoder.layers.0.layer_norm1.bias' is stored twice", "model.safetensors",
                            "more.safetensors"});
  fs::remove(folder / "more.safetensors");

  // A dtype the loader does not read: rewrite one tensor's header entry as I32 (same byte count as F32).
  fs::remove_all(folder);
  write_vit_checkpoint(folder, w, dtype::fp32);
  {
    std::fstream f(folder / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const auto at = bytes.find("\"vision_model.pre_layrnorm.bias\":{\"dtype\":\"F32\"");
    ASSERT_NE(at, std::string::npos);
    const auto type = bytes.find("F32", at);
    f.seekp(static_cast<std::streamoff>(type));
    f.write("I32", 3);
  }
  expect_input_error(open, {"'vision_model.pre_layrnorm.bias' has dtype I32, expected BF16, F16 or F32"});

  fs::remove(folder / "model.safetensors");
  expect_input_error(open, {"no *.safetensors files"});
  std::ofstream(folder / "model.safetensors") << "short";
  expect_input_error(open, {"model.safetensors", "truncated"});
}

TEST(VitCheckpoint, WriterRefusesShapesNoConfigExpresses) {
  temp_dir dir;
  auto c = vit_preset("tiny");
  c.patch_bias = true;
  expect_usage_error([&] { write_vit_checkpoint(dir.path() / "a", random_vit_weights(c, dtype::bf16, 1), dtype::bf16); },
                     {"class_token=yes with patch_bias=yes is neither CLIP", "nor SigLIP"});
  auto s = vit_preset("tiny-siglip");
  expect_usage_error(
      [&] { write_vit_checkpoint(dir.path() / "b", random_vit_weights(s, dtype::bf16, 1), dtype::bf16, vit_layout::llava); },
      {"norm=post cannot be written as a SigLIP vision tower inside LLaVA", "norm=none"});
  c = vit_preset("tiny");
  c.norm = vit_norm::both;
  expect_usage_error([&] { write_vit_checkpoint(dir.path() / "c", random_vit_weights(c, dtype::bf16, 1), dtype::bf16); },
                     {"norm=both cannot be written as a CLIP vision model", "norm=pre"});
  EXPECT_FALSE(fs::exists(dir.path() / "a"));
  EXPECT_FALSE(fs::exists(dir.path() / "b"));
}

}  // namespace
}  // namespace itera::mm
