// llm weights: deterministic random values, and the Hugging Face checkpoint format (config.json +
// safetensors) written and read back, with the errors a bad checkpoint must produce.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"
#include "workloads/gemm/numeric.hpp"
#include "workloads/llm/checkpoint.hpp"
#include "workloads/llm/safetensors.hpp"
#include "workloads/llm/weights.hpp"

namespace itera::llm {
namespace {

namespace fs = std::filesystem;

TEST(LlmWeights, SameSeedSameValuesAndEveryTensorItsOwn) {
  const auto c = preset("tiny");
  const auto a = random_weights(c, dtype::bf16, 7);
  const auto b = random_weights(c, dtype::bf16, 7);
  const auto other = random_weights(c, dtype::bf16, 8);
  for (const auto& spec : tensor_specs(c)) {
    const auto& values = a.tensor(spec);
    ASSERT_EQ(static_cast<std::int64_t>(values.size()), spec.elements()) << spec.name;
    EXPECT_EQ(values, b.tensor(spec)) << spec.name;
    EXPECT_NE(values, other.tensor(spec)) << spec.name << ": the seed must matter";
    EXPECT_EQ(values, random_tensor(spec, dtype::bf16, 7)) << spec.name << ": regenerated alone";
    bool any_nonzero = false;
    for (const float v : values) {
      ASSERT_TRUE(std::isfinite(v));
      ASSERT_EQ(v, round_to_storage(dtype::bf16, v)) << spec.name << ": not a bf16 value";
      any_nonzero = any_nonzero || v != 0.0f;
    }
    EXPECT_TRUE(any_nonzero) << spec.name;
  }
  EXPECT_NE(a.layers[0].q_proj, a.layers[1].q_proj);
  EXPECT_NE(a.layers[0].k_proj, a.layers[0].v_proj);
  EXPECT_NE(a.layers[0].input_norm, a.layers[0].post_attention_norm);
}

TEST(LlmWeights, RealisticScale) {
  const auto c = preset("tiny");
  const auto w = random_weights(c, dtype::fp32, 1);
  double sum = 0, sum_squares = 0;
  for (const float v : w.embedding) {
    sum += v;
    sum_squares += static_cast<double>(v) * v;
  }
  const auto n = static_cast<double>(w.embedding.size());
  EXPECT_NEAR(sum / n, 0.0, 0.001);
  EXPECT_NEAR(std::sqrt(sum_squares / n), init_std, 0.001);
  for (const float v : w.final_norm) {
    EXPECT_GE(v, 0.9f);
    EXPECT_LT(v, 1.1f);
  }
}

// fp8 e4m3 weights: every projection row (and the LM head's with fp8_lm_head) is its scale times
// e4m3 codes, the scale is the row's largest |bf16 value| / 448 (so that value maps to code 448
// exactly), and everything else is the bf16 holder's value. A row of zeros keeps scale 1.
TEST(LlmWeights, Fp8ProjectionsAreRowScaledCodes) {
  for (const bool fp8_head : {false, true}) {
    SCOPED_TRACE(fp8_head ? "fp8_lm_head" : "LM head bf16");
    model_config c = preset("tiny");
    c.fp8_lm_head = fp8_head;  // the LM head as a projection
    const auto bf16_w = random_weights(c, dtype::bf16, 3);
    const auto fp8_w = random_weights(c, dtype::fp8_e4m3, 3);
    EXPECT_EQ(fp8_w.storage, dtype::fp8_e4m3);
    int projections = 0;
    for (const auto& spec : tensor_specs(c)) {
      const auto& q = fp8_w.tensor(spec);
      const auto& b = bf16_w.tensor(spec);
      ASSERT_EQ(q.size(), b.size()) << spec.name;
      if (!spec.fp8) {
        EXPECT_EQ(q, b) << spec.name << ": not a projection, stays bf16";
        continue;
      }
      ++projections;
      const auto cols = static_cast<std::size_t>(spec.shape.back());
      std::vector<std::uint8_t> codes(b.size());
      const auto scales = quantise_fp8_rows(b, spec.shape.back(), codes.data());
      ASSERT_EQ(scales.size(), b.size() / cols);
      std::size_t changed = 0;
      for (std::size_t r = 0; r < scales.size(); ++r) {
        float absmax = 0;
        for (std::size_t i = 0; i < cols; ++i) absmax = std::max(absmax, std::fabs(b[r * cols + i]));
        EXPECT_EQ(scales[r], absmax / 448.0f) << spec.name << " row " << r;
        for (std::size_t i = 0; i < cols; ++i) {
          const float v = q[r * cols + i];
          EXPECT_EQ(v, scales[r] * itera::gemm::numeric::fp8_e4m3_to_float(codes[r * cols + i])) << spec.name;
          EXPECT_LE(std::fabs(v - b[r * cols + i]), std::fabs(b[r * cols + i]) / 16 + scales[r] / 512)
              << spec.name << ": more than e4m3's half step away";
          changed += v != b[r * cols + i] ? 1 : 0;
        }
      }
      EXPECT_GT(changed, b.size() / 4) << spec.name << ": fp8 should round most bf16 values";
    }
    EXPECT_EQ(projections, 7 * c.layers + (fp8_head ? 1 : 0));
  }
  std::vector<std::uint8_t> zero_codes(8);
  EXPECT_EQ(quantise_fp8_rows(std::vector<float>(8, 0.0f), 8, zero_codes.data()), std::vector<float>{1.0f});
  EXPECT_THROW(quantise_fp8_rows(std::vector<float>(7, 1.0f), 8, nullptr), std::logic_error);
}

class LlmCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = fs::path(::testing::TempDir()) / ("itera_llm_ckpt_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(m_dir);
    fs::create_directories(m_dir);
  }
  void TearDown() override { fs::remove_all(m_dir); }

  // The message of the input_error that opening or loading `folder` throws.
  static std::string load_error(const fs::path& folder) {
    try {
      (void)load_checkpoint(folder, dtype::bf16);
    } catch (const input_error& e) {
      return e.what();
    }
    return "(no input_error)";
  }

  // A raw safetensors file: length, header text, data bytes.
  static void write_raw(const fs::path& path, const std::string& header, std::size_t data_bytes) {
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t n = header.size();
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(length), 8);
    out << header << std::string(data_bytes, '\0');
  }

  // Every tensor of `w` but `skip`, in one bf16 file.
  static void write_all_but(const fs::path& path, const model_weights& w, const std::string& skip) {
    std::vector<safetensors_tensor_view> views;
    for (const auto& spec : tensor_specs(w.config))
      if (spec.name != skip) views.push_back({spec.name, spec.shape, w.tensor(spec)});
    write_safetensors(path, views, dtype::bf16);
  }

  fs::path m_dir;
};

TEST_F(LlmCheckpoint, Bf16RoundTripIsExact) {
  const auto w = random_weights(preset("tiny"), dtype::bf16, 42);
  write_checkpoint(m_dir, w, dtype::bf16);
  ASSERT_TRUE(fs::exists(m_dir / "config.json"));
  ASSERT_TRUE(fs::exists(m_dir / "model.safetensors"));
  const auto bytes = fs::file_size(m_dir / "model.safetensors");
  EXPECT_GT(bytes, static_cast<std::uintmax_t>(weight_bytes(w.config, dtype::bf16)));
  EXPECT_LT(bytes, static_cast<std::uintmax_t>(weight_bytes(w.config, dtype::bf16)) + 8192);

  const auto loaded = load_checkpoint(m_dir, dtype::bf16);
  EXPECT_EQ(loaded.config.layers, w.config.layers);
  EXPECT_EQ(loaded.config.hidden, w.config.hidden);
  EXPECT_EQ(loaded.config.kv_heads, w.config.kv_heads);
  EXPECT_EQ(loaded.config.head_dim, w.config.head_dim);
  EXPECT_EQ(loaded.config.rope_theta, w.config.rope_theta);
  EXPECT_EQ(loaded.config.max_position, w.config.max_position);
  for (const auto& spec : tensor_specs(w.config)) EXPECT_EQ(loaded.tensor(spec), w.tensor(spec)) << spec.name;
}

// The LM head quantised too (lm_head=fp8_e4m3): a bf16 checkpoint loaded for fp8 storage with
// fp8_lm_head rounds the LM head as random_weights does for that config (row scales and codes, as
// a projection), and leaves it bf16 without; the flag travels on the loaded config, the file's
// config.json does not hold it.
TEST_F(LlmCheckpoint, Fp8LmHeadIsRoundedAtLoadWhenAsked) {
  model_config c = preset("tiny");
  const auto w = random_weights(c, dtype::bf16, 7);
  write_checkpoint(m_dir, w, dtype::bf16);
  c.fp8_lm_head = true;
  const auto want = random_weights(c, dtype::fp8_e4m3, 7);
  const auto head = load_checkpoint(m_dir, dtype::fp8_e4m3, true);
  EXPECT_TRUE(head.config.fp8_lm_head);
  EXPECT_EQ(head.lm_head, want.lm_head);
  EXPECT_NE(head.lm_head, w.lm_head);
  EXPECT_EQ(head.layers.at(1).down_proj, want.layers.at(1).down_proj);
  const auto plain = load_checkpoint(m_dir, dtype::fp8_e4m3);
  EXPECT_FALSE(plain.config.fp8_lm_head);
  EXPECT_EQ(plain.lm_head, w.lm_head) << "bf16 values stay bf16";
  EXPECT_EQ(plain.layers.at(1).down_proj, want.layers.at(1).down_proj);
}

// A weight past fp16's 65504 cannot be held in fp16: loading for fp16 storage is refused with the
// tensor's name (it would otherwise become infinity in every engine); bf16 holds it.
TEST_F(LlmCheckpoint, Fp16RefusesAWeightPastItsRange) {
  auto w = random_weights(preset("tiny"), dtype::bf16, 42);
  const tensor_spec target = tensor_specs(w.config).at(3);
  w.tensor(target)[5] = 70144.0f;  // a bf16 value
  write_checkpoint(m_dir, w, dtype::bf16);
  try {
    (void)load_checkpoint(m_dir, dtype::fp16);
    ADD_FAILURE() << "a weight of 70144 was loaded as fp16";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(target.name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("65504"), std::string::npos) << e.what();
  }
  const auto loaded = load_checkpoint(m_dir, dtype::bf16);
  EXPECT_EQ(loaded.tensor(target)[5], 70144.0f);
  EXPECT_NO_THROW((void)random_tensor(target, dtype::fp16, 1)) << "random weights stay in fp16's range";
}

TEST_F(LlmCheckpoint, ShardedBiasedTiedScaledConfigRoundTrips) {
  auto c = preset("tiny");
  c.attention_bias = true;
  c.tie_embeddings = true;
  c.rope_scaling = rope_scaling_llama3{8.0, 1.0, 4.0, 128};
  const auto w = random_weights(c, dtype::fp32, 3);
  write_checkpoint(m_dir, w, dtype::fp32, 3);
  EXPECT_TRUE(fs::exists(m_dir / "model-00003-of-00003.safetensors"));
  EXPECT_TRUE(fs::exists(m_dir / "model.safetensors.index.json"));

  const checkpoint ckpt(m_dir);
  EXPECT_EQ(ckpt.files().size(), 3u);
  const auto& rc = ckpt.config();
  EXPECT_TRUE(rc.attention_bias);
  EXPECT_TRUE(rc.tie_embeddings);
  ASSERT_TRUE(rc.rope_scaling.has_value());
  EXPECT_EQ(rc.rope_scaling->factor, 8.0);
  EXPECT_EQ(rc.rope_scaling->original_max_position, 128);
  // fp32 in the files, rounded to bf16 on loading: what a bf16 engine would hold.
  const auto loaded = ckpt.load(dtype::bf16);
  for (const auto& spec : tensor_specs(c)) {
    auto expected = w.tensor(spec);
    round_to_storage(dtype::bf16, expected);
    EXPECT_EQ(loaded.tensor(spec), expected) << spec.name;
  }
  EXPECT_FALSE(loaded.layers[1].v_bias.empty());
}

TEST_F(LlmCheckpoint, WrongShapeNamesTensorAndBothShapes) {
  write_checkpoint(m_dir, random_weights(preset("tiny"), dtype::bf16, 1), dtype::bf16);
  auto config = nlohmann::json::parse(std::ifstream(m_dir / "config.json"));
  config["num_key_value_heads"] = 4;  // k_proj should now be [64, 64]; the file holds [32, 64]
  std::ofstream(m_dir / "config.json") << config.dump();
  const auto message = load_error(m_dir);
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("'model.layers.0.self_attn.k_proj.weight' has shape [32, 64], expected [64, 64]"),
            std::string::npos)
      << message;
}

TEST_F(LlmCheckpoint, MissingTensorIsNamed) {
  const auto w = random_weights(preset("tiny"), dtype::bf16, 1);
  write_checkpoint(m_dir, w, dtype::bf16);
  write_all_but(m_dir / "model.safetensors", w, "model.layers.1.mlp.up_proj.weight");
  const auto message = load_error(m_dir);
  EXPECT_NE(message.find("tensor 'model.layers.1.mlp.up_proj.weight' is missing"), std::string::npos) << message;
  EXPECT_NE(message.find("[128, 64]"), std::string::npos) << message;
}

TEST_F(LlmCheckpoint, WrongDtypeIsNamed) {
  const auto w = random_weights(preset("tiny"), dtype::bf16, 1);
  write_checkpoint(m_dir, w, dtype::bf16);
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  write_all_but(m_dir / "model.safetensors", w, name);
  write_raw(m_dir / "extra.safetensors",
            R"({")" + name + R"(":{"dtype":"I32","shape":[64,128],"data_offsets":[0,32768]}})", 32768);
  const auto message = load_error(m_dir);
  EXPECT_NE(message.find("extra.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("'" + name + "' has dtype I32, expected BF16, F16 or F32"), std::string::npos) << message;
}

TEST_F(LlmCheckpoint, TruncatedFileIsCaught) {
  write_checkpoint(m_dir, random_weights(preset("tiny"), dtype::bf16, 1), dtype::bf16);
  const auto path = m_dir / "model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 100);
  const auto message = load_error(m_dir);
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;

  fs::resize_file(path, 5);
  EXPECT_NE(load_error(m_dir).find("truncated"), std::string::npos);
}

TEST_F(LlmCheckpoint, MalformedHeadersAreCaught) {
  write_checkpoint(m_dir, random_weights(preset("tiny"), dtype::bf16, 1), dtype::bf16);
  const auto path = m_dir / "model.safetensors";
  const auto message_for = [&](const std::string& header, std::size_t data_bytes) {
    write_raw(path, header, data_bytes);
    return load_error(m_dir);
  };
  EXPECT_NE(message_for("{\"a\": [1, 2", 0).find("malformed header (not JSON)"), std::string::npos);
  EXPECT_NE(message_for("[1, 2, 3]", 0).find("not a JSON object"), std::string::npos);
  EXPECT_NE(message_for(R"({"x":{"dtype":"F32","shape":[2]}})", 8).find("'x' needs \"data_offsets\""), std::string::npos);
  EXPECT_NE(message_for(R"({"x":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8).find("unknown dtype 'Q4'"),
            std::string::npos);
  EXPECT_NE(message_for(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8).find("needs 12 bytes"),
            std::string::npos);
  // A header length that runs past the end of the file: a foreign or cut file.
  {
    std::ofstream out(path, std::ios::binary);
    const unsigned char length[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    out.write(reinterpret_cast<const char*>(length), 8);
    out << "{}";
  }
  EXPECT_NE(load_error(m_dir).find("runs past the end of the file"), std::string::npos);
}

TEST_F(LlmCheckpoint, DuplicateTensorAcrossShards) {
  const auto w = random_weights(preset("tiny"), dtype::bf16, 1);
  write_checkpoint(m_dir, w, dtype::bf16);
  const auto spec = tensor_specs(w.config).front();
  const safetensors_tensor_view view{spec.name, spec.shape, w.tensor(spec)};
  write_safetensors(m_dir / "again.safetensors", std::span(&view, 1), dtype::bf16);
  EXPECT_NE(load_error(m_dir).find("'model.embed_tokens.weight' is stored twice"), std::string::npos);
}

TEST_F(LlmCheckpoint, ConfigErrorsNameTheField) {
  write_checkpoint(m_dir, random_weights(preset("tiny"), dtype::bf16, 1), dtype::bf16);
  const auto original = nlohmann::json::parse(std::ifstream(m_dir / "config.json"));
  const auto message_with = [&](auto edit) {
    auto config = original;
    edit(config);
    std::ofstream(m_dir / "config.json") << config.dump();
    return load_error(m_dir);
  };
  auto m = message_with([](auto& j) { j.erase("hidden_size"); });
  EXPECT_NE(m.find("config.json: field 'hidden_size' is missing"), std::string::npos) << m;
  m = message_with([](auto& j) { j["num_hidden_layers"] = "two"; });
  EXPECT_NE(m.find("'num_hidden_layers' must be a whole number"), std::string::npos) << m;
  m = message_with([](auto& j) { j["model_type"] = "gpt2"; });
  EXPECT_NE(m.find("model_type 'gpt2'"), std::string::npos) << m;
  m = message_with([](auto& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  EXPECT_NE(m.find("rope_scaling type 'yarn' is not supported"), std::string::npos) << m;
  m = message_with([](auto& j) { j["num_key_value_heads"] = 3; });
  EXPECT_NE(m.find("heads 4 is not divisible by kv_heads 3"), std::string::npos) << m;
  m = message_with([](auto& j) { j["attention_bias"] = true; });
  EXPECT_NE(m.find("o_proj bias"), std::string::npos) << m;

  // A sliding window caps the context: inside it, full attention is the same computation.
  auto config = original;
  config["sliding_window"] = 128;
  std::ofstream(m_dir / "config.json") << config.dump();
  EXPECT_EQ(read_hf_config(m_dir / "config.json").max_position, 128);

  fs::remove(m_dir / "config.json");
  EXPECT_NE(load_error(m_dir).find("needs config.json"), std::string::npos);
  EXPECT_NE(load_error(m_dir / "nowhere").find("not a checkpoint folder"), std::string::npos);
}

}  // namespace
}  // namespace itera::llm
