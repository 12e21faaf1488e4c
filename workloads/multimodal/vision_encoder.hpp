#pragma once
// The vision_encoder workload (issue 4, stages 4 and 5): the ViT encoder and the LLaVA projector on
// a batch of patchified images already on the device (the compute-only loop), on the cpu reference
// (vit_cpu.hpp) or the cuda engine (vit_gpu.hpp). Each case declares its work (vit_stages), checks
// the cuda output against the cpu reference on a few images of the batch, times encode + project,
// and reports images/s and the encoder GEMMs' FLOP/s against the measured GEMM ceiling
// (docs/multimodal.md, "CUDA encoder").
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "itera/core/runner.hpp"
#include "itera/core/workload.hpp"
#include "workloads/multimodal/vit_cpu.hpp"
#include "workloads/multimodal/vit_gpu.hpp"
#include "workloads/multimodal/vit_model.hpp"
#include "workloads/multimodal/vit_weights.hpp"

namespace itera::mm {

inline constexpr int vision_encoder_version = 1;

// The axis declarations and the `itera run` suite; backends are filled in by src/lib/registry.cpp.
workload_decl vision_encoder_declaration();
void run_vision_encoder_cpu(case_state& state);
void run_vision_encoder_cuda(case_state& state);  // vit_run_cuda.cpp (cuda builds)

// One case's axes, read and checked.
struct vit_case {
  vit_config config;
  std::string checkpoint = "random";  // or a Hugging Face folder
  dtype weights = dtype::bf16, activations = dtype::bf16;
  std::int64_t batch = 1;
  std::int64_t check_images = 2;  // images of the batch checked against the reference (at most the batch)
  vit_stage_names stages = vit_stage_names::kinds;
  bool graph = false;
  // cuda, quick_gelu and gelu: fc1's sums rounded to bf16 before the activation (vit_engine_options).
  bool fc1_bf16_sums = false;
  std::uint64_t seed = 1;
};
// usage_error for axes that contradict each other (a shape over a checkpoint).
vit_case read_vit_case(const case_state& st);

// The case's weights in `storage`: random from the seed, or the checkpoint's (its projector random
// from the seed when the folder has none). The last model asked for is kept, so the cases of a
// sweep share it.
std::shared_ptr<const vit_weights> case_weights(const vit_case& c, dtype storage);

// Patch rows [images, G*G, C*P*P] uniform in [-2, 2) (normalised pixels' scale); element e of
// image i depends on (seed, i, e) only, so the first images of any batch are the same.
std::vector<float> random_patches(const vit_config& c, std::int64_t images, std::uint64_t seed);

// The normalised error allowed between an engine with bf16 activations and the bf16 reference, and
// between the bf16 and fp32 references: 2e-2 (the bf16 reference itself drifts 5e-3 on the tiny
// presets and 9.4e-3 on ViT-L/14 from fp32; docs/multimodal.md).
inline constexpr double vit_tolerance = 2e-2;

// The reference's outputs on the first `images` images of random_patches(seed) (activations bf16
// or fp32); the last one asked for is kept.
std::shared_ptr<const vit_reference::output> reference_outputs(const vit_case& c, const vit_weights& w, dtype activations,
                                                               std::int64_t images);

// Normalised errors of features and image tokens against a reference, the case's verification
// (error: the larger; method names both and the images), metrics verification/features_error and
// verification/image_tokens_error. Returns whether both are within vit_tolerance.
bool record_verification(case_state& st, const token_tensor& features, const token_tensor& image_tokens,
                         const vit_reference::output& ref, const std::string& against);

// The work of `images` images (encoder + projector; weights once), declared with set_work, and
// recipe fields common to both backends.
void declare_case(case_state& st, const vit_case& c);

// After the run (on_finish): images/s from the median; from the stages when recorded, images/s of
// the encoder alone (the median less the projector's stages), the encoder GEMMs' and the
// attention's FLOP/s, and the GEMMs' share of the gemm ceiling of the weights' type.
void add_vit_metrics(case_record& r, const ceiling_table& ceilings, const vit_case& c);

}  // namespace itera::mm
