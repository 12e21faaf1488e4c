// The vision encoder's shape: presets, the shape spec, validation errors, and the work each stage
// declares, against numbers computed by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>

#include "itera/core/errors.hpp"
#include "vit_test_support.hpp"
#include "workloads/multimodal/vit_model.hpp"

namespace itera::mm {
namespace {

using test::expect_usage_error;

TEST(VitModel, PresetsHaveThePublishedShapes) {
  const auto l224 = vit_preset("clip-vit-large-patch14");
  EXPECT_EQ(l224.layers, 24);
  EXPECT_EQ(l224.hidden, 1024);
  EXPECT_EQ(l224.heads, 16);
  EXPECT_EQ(l224.mlp, 4096);
  EXPECT_EQ(l224.patch, 14);
  EXPECT_EQ(l224.image, 224);
  EXPECT_EQ(l224.tokens(), 16 * 16 + 1);
  EXPECT_EQ(l224.head_dim(), 64);
  EXPECT_EQ(l224.activation, vit_activation::quick_gelu);
  EXPECT_TRUE(l224.class_token);
  EXPECT_FALSE(l224.patch_bias);
  EXPECT_TRUE(l224.pre_norm());
  EXPECT_FALSE(l224.post_norm());
  EXPECT_EQ(l224.projector_tokens(), 256);  // LLaVA's default: the class token left out

  const auto l336 = vit_preset("clip-vit-large-patch14-336");
  EXPECT_EQ(l336.image, 336);
  EXPECT_EQ(l336.tokens(), 24 * 24 + 1);
  EXPECT_EQ(l336.projector_tokens(), 576);  // LLaVA-1.5's 576 image tokens

  const auto so = vit_preset("siglip-so400m-patch14-384");
  EXPECT_EQ(so.layers, 27);
  EXPECT_EQ(so.hidden, 1152);
  EXPECT_EQ(so.heads, 16);
  EXPECT_EQ(so.mlp, 4304);
  EXPECT_EQ(so.tokens(), 27 * 27);
  EXPECT_EQ(so.head_dim(), 72);
  EXPECT_EQ(so.activation, vit_activation::gelu_tanh);
  EXPECT_FALSE(so.class_token);
  EXPECT_TRUE(so.patch_bias);
  EXPECT_FALSE(so.pre_norm());
  EXPECT_TRUE(so.post_norm());
  EXPECT_DOUBLE_EQ(so.layer_norm_eps, 1e-6);

  for (const auto& name : vit_preset_names()) EXPECT_NO_THROW(validate(vit_preset(name))) << name;
  expect_usage_error([] { (void)vit_preset("vit-huge"); }, {"unknown vision encoder preset 'vit-huge'", "tiny-siglip"});
}

// Parameter counts by hand. ViT-L/14 per layer: q, k, v, out 4 x (1024^2 + 1024) = 4,198,400;
// fc1 4096 x 1024 + 4096 = 4,198,400; fc2 1024 x 4096 + 1024 = 4,195,328; two LayerNorms 4,096:
// 12,596,224. Embeddings: patch 1024 x 588 = 602,112, class 1,024, positions 257 x 1024 = 263,168:
// 866,304. pre_layrnorm 2,048. Total 866,304 + 24 x 12,596,224 + 2,048 = 303,177,728
// (transformers' CLIPVisionModel adds its post_layernorm, 2,048, which the features do not use).
TEST(VitModel, ParameterCountsByHand) {
  const auto l = count_params(vit_preset("clip-vit-large-patch14"));
  EXPECT_EQ(l.per_layer, 12'596'224);
  EXPECT_EQ(l.embeddings, 866'304);
  EXPECT_EQ(l.outer_norms, 2'048);
  EXPECT_EQ(l.encoder(), 303'177'728);
  // Projector 1024 -> 4096 -> 4096: 4096 x 1024 + 4096 + 4096 x 4096 + 4096 = 20,979,712.
  EXPECT_EQ(l.projector, 20'979'712);
  // SigLIP so400m: per layer 4 x (1152^2 + 1152) + (4304 x 1152 + 4304) + (1152 x 4304 + 1152) + 4 x 1152
  // = 5,313,024 + 4,962,512 + 4,959,360 + 4,608 = 15,239,504; embeddings 1152 x 588 + 1152 (bias)
  // + 729 x 1152 = 1,518,336; post_layernorm 2,304: 1,518,336 + 27 x 15,239,504 + 2,304 = 412,987,248.
  const auto s = count_params(vit_preset("siglip-so400m-patch14-384"));
  EXPECT_EQ(s.per_layer, 15'239'504);
  EXPECT_EQ(s.embeddings, 1'518'336);
  EXPECT_EQ(s.encoder(), 412'987'248);
}

// ViT-L/14 at 224, per image (T = 257 tokens, D = 1024, MLP 4096, K = 3 x 14 x 14 = 588):
//   patch embedding  2 x 256 x 588 x 1024          =   308,281,344
//   per layer qkv    2 x 257 x 1024 x 3072         = 1,616,904,192
//             out    2 x 257 x 1024 x 1024         =   538,968,064
//             fc1    2 x 257 x 1024 x 4096         = 2,155,872,256
//             fc2    the same                      = 2,155,872,256
//             attention QK^T + PV: 4 x 257^2 x 1024 =  270,536,704
//             layer total                          = 6,738,153,472
//   24 layers 161,715,683,328 + patch 308,281,344  = 162,023,964,672 FLOP (about 162 GFLOP)
//   of which GEMMs 155,531,083,776 and attention 6,492,880,896.
// At 3400 images/s that is 551 TFLOP/s, 71% of the 771 TFLOP/s bf16 GEMM measured on an H200.
TEST(VitModel, ViTL14At224FlopsByHand) {
  const auto c = vit_preset("clip-vit-large-patch14");
  const auto stages = vit_stages(c, dtype::bf16, dtype::bf16);
  const auto find = [&](const std::string& name) {
    const auto it = std::find_if(stages.begin(), stages.end(), [&](const vit_stage& s) { return s.name == name; });
    EXPECT_NE(it, stages.end()) << name;
    return *it;
  };
  EXPECT_DOUBLE_EQ(find("patch_embed").matmul_flops, 308'281'344.0);
  EXPECT_DOUBLE_EQ(find("layer.0.qkv").matmul_flops, 1'616'904'192.0);
  EXPECT_DOUBLE_EQ(find("layer.7.out").matmul_flops, 538'968'064.0);
  EXPECT_DOUBLE_EQ(find("layer.23.fc1").matmul_flops, 2'155'872'256.0);
  EXPECT_DOUBLE_EQ(find("layer.23.fc2").matmul_flops, 2'155'872'256.0);
  EXPECT_DOUBLE_EQ(find("layer.11.attention").matmul_flops, 270'536'704.0);
  EXPECT_EQ(find("layer.0.qkv").gemm_m, 257);
  EXPECT_EQ(find("layer.0.qkv").gemm_n, 3072);
  EXPECT_EQ(find("layer.0.qkv").gemm_k, 1024);
  EXPECT_EQ(find("patch_embed").gemm_m, 256);
  EXPECT_EQ(find("patch_embed").gemm_k, 588);

  const auto enc = sum_work(stages, 1, vit_part::encoder);
  EXPECT_DOUBLE_EQ(enc.matmul_flops, 162'023'964'672.0);
  EXPECT_DOUBLE_EQ(enc.gemm_flops, 155'531'083'776.0);
  EXPECT_DOUBLE_EQ(enc.attention_flops, 6'492'880'896.0);
  EXPECT_NEAR(enc.matmul_flops / 1e9, 162.0, 0.05);
  // A batch multiplies FLOPs and activation bytes, not weight bytes.
  const auto batch = sum_work(stages, 128, vit_part::encoder);
  EXPECT_DOUBLE_EQ(batch.matmul_flops, 128 * 162'023'964'672.0);
  EXPECT_DOUBLE_EQ(batch.weight_bytes, enc.weight_bytes);
  EXPECT_DOUBLE_EQ(batch.activation_bytes, 128 * enc.activation_bytes);
  // Weights read once: every encoder parameter in bf16.
  EXPECT_DOUBLE_EQ(enc.weight_bytes, 2.0 * 303'177'728);

  // Projector on the 256 patch tokens: 2 x 256 x (1024 x 4096 + 4096 x 4096) = 10,737,418,240.
  const auto proj = sum_work(stages, 1, vit_part::projector);
  EXPECT_DOUBLE_EQ(proj.matmul_flops, 10'737'418'240.0);
  EXPECT_DOUBLE_EQ(proj.weight_bytes, 2.0 * 20'979'712);
}

TEST(VitModel, OtherPresetsFlopsByHand) {
  // ViT-L/14 at 336: T = 577, 576 patches. Per layer 2 x 577 x 1024 x (3072 + 1024 + 2 x 4096)
  // = 14,520,680,448 plus attention 4 x 577^2 x 1024 = 1,363,677,184: 15,884,357,632; x 24 =
  // 381,224,583,168; patch 2 x 576 x 588 x 1024 = 693,633,024: 381,918,216,192.
  const auto l336 = sum_work(vit_stages(vit_preset("clip-vit-large-patch14-336"), dtype::bf16, dtype::bf16), 1,
                             vit_part::encoder);
  EXPECT_DOUBLE_EQ(l336.matmul_flops, 381'918'216'192.0);
  // SigLIP so400m at 384: T = 729 (no class token). Per layer 2 x 729 x 1152 x (3456 + 1152 + 2 x 4304)
  // = 22,197,805,056 plus 4 x 729^2 x 1152 = 2,448,880,128: 24,646,685,184; x 27 = 665,460,499,968;
  // patch 2 x 729 x 588 x 1152 = 987,614,208: 666,448,114,176.
  const auto so = sum_work(vit_stages(vit_preset("siglip-so400m-patch14-384"), dtype::bf16, dtype::bf16), 1,
                           vit_part::encoder);
  EXPECT_DOUBLE_EQ(so.matmul_flops, 666'448'114'176.0);
}

TEST(VitModel, StageBytesAndNominalFlops) {
  const auto c = vit_preset("clip-vit-large-patch14");
  const auto stages = vit_stages(c, dtype::bf16, dtype::bf16);
  const double row = 257.0 * 1024 * 2;  // one token row set, bf16
  const auto stage = [&](std::string_view name) -> const vit_stage& {
    const auto it = std::find_if(stages.begin(), stages.end(), [&](const vit_stage& s) { return s.name == name; });
    if (it == stages.end()) throw std::logic_error(std::string(name) + " is not a stage");
    return *it;
  };
  const auto& qkv = stage("layer.0.qkv");
  EXPECT_DOUBLE_EQ(qkv.bytes_read, row);
  EXPECT_DOUBLE_EQ(qkv.bytes_written, 3 * row);
  EXPECT_DOUBLE_EQ(qkv.weight_bytes, (3.0 * 1024 * 1024 + 3 * 1024) * 2);
  const auto& att = stage("layer.0.attention");
  EXPECT_DOUBLE_EQ(att.bytes_read, 3 * row);  // q, k, v; no T x T matrix stored
  EXPECT_DOUBLE_EQ(att.bytes_written, row);
  EXPECT_DOUBLE_EQ(att.other_flops, 5.0 * 16 * 257 * 257 + 257.0 * 1024);
  EXPECT_EQ(att.gemm_m, 0);  // not one GEMM: many per head
  EXPECT_DOUBLE_EQ(stage("layer.0.fc2").bytes_read, 257.0 * 4096 * 2 + row);  // input + residual
  EXPECT_DOUBLE_EQ(stage("layer.0.norm1").other_flops, 8.0 * 257 * 1024);
  EXPECT_DOUBLE_EQ(stage("layer.0.norm1").matmul_flops, 0.0);
  EXPECT_DOUBLE_EQ(stage("layer.0.fc1").other_flops, 257.0 * 4096 * (1 + 4));  // bias + quick_gelu
  EXPECT_DOUBLE_EQ(stage("patch_embed").weight_bytes, (1024.0 * 588 + 1024 + 257 * 1024) * 2);
  EXPECT_DOUBLE_EQ(stage("patch_embed").bytes_read, 256.0 * 588 * 2);
  // Stage list: patch_embed, pre_norm, 7 per layer, projector fc1 and fc2; post_norm only for SigLIP.
  EXPECT_EQ(stages.size(), 2 + 24 * 7 + 2);
  EXPECT_EQ(stages[1].kind, vit_stage_kind::pre_norm);
  const auto so = vit_stages(vit_preset("siglip-so400m-patch14-384"), dtype::bf16, dtype::bf16);
  EXPECT_EQ(so.size(), 1 + 27 * 7 + 1 + 2);
  EXPECT_EQ(so[so.size() - 3].kind, vit_stage_kind::post_norm);
  // fp32 activations double the activation bytes, not the FLOPs.
  const auto f = sum_work(vit_stages(c, dtype::bf16, dtype::fp32), 1);
  const auto b = sum_work(stages, 1);
  EXPECT_DOUBLE_EQ(f.activation_bytes, 2 * b.activation_bytes);
  EXPECT_DOUBLE_EQ(f.flops(), b.flops());
  expect_usage_error([&] { (void)vit_stages(c, dtype::fp8_e4m3, dtype::bf16); }, {"fp8"});
  expect_usage_error([&] { (void)sum_work(stages, -1); }, {"-1 images"});
}

TEST(VitModel, ShapeSpecOverridesThePreset) {
  const auto c = apply_vit_shape(vit_preset("clip-vit-large-patch14"),
                                 "layers=12;image=336;class_token=no;patch_bias=yes;activation=gelu_pytorch_tanh;"
                                 "norm=post;llm_hidden=3584;select=all;heads=8;hidden=512;mlp=2048;patch=16;channels=1");
  EXPECT_EQ(c.layers, 12);
  EXPECT_EQ(c.image, 336);
  EXPECT_EQ(c.patch, 16);
  EXPECT_EQ(c.channels, 1);
  EXPECT_EQ(c.hidden, 512);
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.mlp, 2048);
  EXPECT_FALSE(c.class_token);
  EXPECT_TRUE(c.patch_bias);
  EXPECT_EQ(c.activation, vit_activation::gelu_tanh);
  EXPECT_EQ(c.norm, vit_norm::post);
  EXPECT_EQ(c.llm_hidden, 3584);
  EXPECT_EQ(c.select, feature_select::all);
  EXPECT_EQ(c.tokens(), 21 * 21);
  EXPECT_EQ(c.patch_dim(), 256);
  EXPECT_NE(c.name.find("shape from axes"), std::string::npos);
  // "preset" and the empty spec keep it; a value equal to the preset's is no change.
  EXPECT_EQ(apply_vit_shape(vit_preset("tiny"), "preset").name, "tiny");
  EXPECT_EQ(apply_vit_shape(vit_preset("tiny"), "").name, "tiny");
  EXPECT_EQ(apply_vit_shape(vit_preset("tiny"), "layers=2;norm=pre").name, "tiny");
  EXPECT_EQ(apply_vit_shape(vit_preset("tiny"), "layers=preset;norm=both").norm, vit_norm::both);
}

TEST(VitModel, EveryShapeErrorSaysWhatToChange) {
  const auto tiny = vit_preset("tiny");
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "depth=3"); }, {"'depth' is not a field", "layers"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "layers"); }, {"'layers' is not FIELD=VALUE"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "=3"); }, {"'=3' is not FIELD=VALUE"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "layers=two"); }, {"layers='two' is not a whole number"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "class_token=maybe"); }, {"class_token='maybe' must be yes or no"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "activation=relu"); },
                     {"activation 'relu' is not supported", "quick_gelu", "gelu_pytorch_tanh"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "norm=middle"); }, {"norm 'middle'", "pre", "post"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "select=some"); }, {"select 'some'", "patches", "all"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "layers=0"); }, {"vision encoder tiny", "layers must be at least 1, got 0"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "llm_hidden=-4"); }, {"llm_hidden must be at least 1, got -4"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "heads=6"); },
                     {"hidden 64 is not divisible by heads 6", "heads=4"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "image=3"); },
                     {"image 3 is smaller than patch 4", "image=4 or more"});
  // A side that is not a multiple of the patch leaves the remainder unread, as Conv2d does.
  EXPECT_EQ(apply_vit_shape(tiny, "image=19").tokens(), 4 * 4 + 1);
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "patch=1;image=4096"); }, {"tokens", "exceed", "larger patch"});
  expect_usage_error([&] { (void)apply_vit_shape(tiny, "mlp=4294967296"); }, {"mlp = 4294967296 exceeds"});
  auto bad_eps = tiny;
  bad_eps.layer_norm_eps = 0;
  expect_usage_error([&] { validate(bad_eps); }, {"layer_norm_eps must be positive"});
}

}  // namespace
}  // namespace itera::mm
