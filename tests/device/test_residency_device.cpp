// Residency (R11) on the device: evictable buffers give their memory back and get it again at the
// same address; the vision encoder and the llm engine, offloaded and restored with their weights
// written back from a store (page-locked host memory or a file), compute exactly what they
// computed before, their CUDA graphs included; the engines' plans equal what they allocate.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "workloads/llm/model.hpp"
#include "workloads/multimodal/vit_model.hpp"
#include "workloads/multimodal/vit_weights.hpp"

#if ITERA_WITH_CUDA
#include <cuda_runtime_api.h>

#include "itera/core/recorder.hpp"
#include "itera/core/workload.hpp"
#include "itera/cuda/cuda_backend.hpp"
#include "tests/support/cuda_test.hpp"
#include "tests/support/quick_run.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/memory.hpp"
#include "src/cuda/weight_store.hpp"
#include "workloads/llm/llm_cuda.hpp"
#include "workloads/multimodal/vit_gpu.hpp"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(residency_device, evictable_buffers) { GTEST_SKIP() << "built without the cuda backend"; }

#else

using namespace itera;

class residency_device : public test::cuda_test {
 protected:
  void SetUp() override {
    test::cuda_test::SetUp();
    if (IsSkipped()) return;
    dev = m_dev.get();
    if (const std::string why = cuda::evictable_unavailable_reason(dev->device_index()); !why.empty())
      GTEST_SKIP() << why;
  }
  std::filesystem::path file(const std::string& name) const {
    return std::filesystem::temp_directory_path() / ("itera-residency-" + std::to_string(::getpid()) + "-" + name);
  }
  backend* dev = nullptr;  // m_dev's
};

// Restored memory may be the same physical pages with the old weights still in them: poison them,
// so that only the store's copy can make the results right again. In the backend's stream order: a
// plain cudaMemset (the legacy stream) could land after the store's copy or the engine's kernels.
void poison(backend& dev, void* device, std::uint64_t bytes) { cuda::as_cuda(dev).fill(device, 0xff, bytes); }

std::vector<std::uint8_t> read_back(const cuda::device_buffer& b) {
  std::vector<std::uint8_t> out(b.bytes());
  EXPECT_EQ(cudaMemcpy(out.data(), b.data(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

TEST_F(residency_device, evictable_buffer_gives_memory_back_at_the_same_address) {
  auto& cu = cuda::as_cuda(*dev);
  memory_tracker& t = dev->memory_tracking();
  const std::size_t bytes = std::size_t{512} << 20;
  const std::uint64_t before = t.current();
  cuda::device_buffer b = cu.allocate_evictable(bytes);
  ASSERT_TRUE(b.is_evictable());
  EXPECT_EQ(t.current(), before + bytes);
  void* const at = b.data();
  ASSERT_EQ(cudaMemset(b.data(), 0x5a, bytes), cudaSuccess);
  EXPECT_EQ(read_back(b)[bytes - 1], 0x5a);

  const auto free_mapped = dev->memory().free_bytes;
  b.evict();
  EXPECT_FALSE(b.resident());
  EXPECT_EQ(t.current(), before);
  const auto free_evicted = dev->memory().free_bytes;
  // The driver's view: the physical memory really went back (allowing for other processes).
  EXPECT_GE(free_evicted, free_mapped + bytes - (std::size_t{64} << 20))
      << "free " << free_mapped << " -> " << free_evicted;
  b.evict();  // already evicted: nothing
  b.restore();
  EXPECT_TRUE(b.resident());
  EXPECT_EQ(b.data(), at);
  EXPECT_EQ(t.current(), before + bytes);
  ASSERT_EQ(cudaMemset(b.data(), 0x3c, bytes), cudaSuccess);
  const auto back = read_back(b);
  EXPECT_EQ(back[0], 0x3c);
  EXPECT_EQ(back[bytes / 2], 0x3c);
  cuda::device_buffer plain = cu.allocate(4096);
  EXPECT_THROW(plain.evict(), std::logic_error);
}

// The tiny encoder twice over the same patches, offloaded and restored between, the weights
// written back from each kind of store: the same image tokens bit for bit, eager and graph.
TEST_F(residency_device, vision_encoder_offloaded_and_restored_computes_the_same) {
  using namespace itera::mm;
  const auto c = vit_preset("tiny");
  const auto w = random_vit_weights(c, dtype::bf16, 5);
  vit_engine_options o;
  o.max_images = 3;
  o.evictable = true;
  gpu_vit eng(*dev, w, o);
  const auto m = eng.memory();
  const auto p = gpu_vit::plan(*dev, c, o);
  EXPECT_EQ(p.weights, m.weights);
  EXPECT_EQ(p.activations, m.activations);
  EXPECT_EQ(p.workspace, m.workspace);

  std::vector<float> patches(static_cast<std::size_t>(3 * c.patches() * c.patch_dim()));
  for (std::size_t i = 0; i < patches.size(); ++i) patches[i] = static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
  (void)eng.project(eng.encode(eng.upload_patches(patches, 3), 3), 3);
  const auto want = eng.download_image_tokens(3).values;

  for (const auto kind : {cuda::store_kind::pinned, cuda::store_kind::disk}) {
    SCOPED_TRACE(std::string(cuda::store_kind_name(kind)));
    cuda::weight_store store(*dev, kind, eng.weights_device(), eng.weights_bytes(), file("vit"));
    const std::uint64_t mapped = dev->memory_tracking().current();
    eng.offload();
    EXPECT_FALSE(eng.resident());
    // The image tokens stay (the language model reads them after the encoder is gone).
    EXPECT_EQ(dev->memory_tracking().current(), mapped - m.weights - (m.activations - 3 * c.projector_tokens() * c.llm_hidden * 2));
    eng.restore();
    poison(*dev, eng.weights_device(), eng.weights_bytes());
    const auto r = store.load(eng.weights_device());
    EXPECT_EQ(r.bytes, eng.weights_bytes());
    if (kind == cuda::store_kind::disk) {
      EXPECT_GE(r.cached_fraction, 0.0);
      EXPECT_TRUE(std::filesystem::exists(store.file()));
    }
    (void)eng.project(eng.encode(eng.upload_patches(patches, 3), 3), 3);
    EXPECT_EQ(eng.download_image_tokens(3).values, want);
    eng.capture(eng.upload_patches(patches, 3), 3);
    eng.offload();
    eng.restore();
    poison(*dev, eng.weights_device(), eng.weights_bytes());
    (void)store.load(eng.weights_device());
    (void)eng.upload_patches(patches, 3);  // the input buffer is evictable too: fill it again
    eng.run_graph();
    eng.synchronize();
    EXPECT_EQ(eng.download_image_tokens(3).values, want);
  }
  // Without the store's copy the poisoned weights give other tokens: the check above can fail.
  eng.offload();
  eng.restore();
  poison(*dev, eng.weights_device(), eng.weights_bytes());
  (void)eng.project(eng.encode(eng.upload_patches(patches, 3), 3), 3);
  EXPECT_NE(eng.download_image_tokens(3).values, want);
}

// The tiny language model: prefill and decode (eager and graph) before and after an offload, the
// weights from a store: the same token ids. Its plan equals what it allocated.
TEST_F(residency_device, language_model_offloaded_and_restored_generates_the_same) {
  using namespace itera::llm;
  const model_config c = preset("tiny");
  engine_options o;
  o.batch = 2;
  o.max_context = 24;
  o.max_prompt = 8;
  o.evictable = true;
  cuda_engine eng(*dev, c, 7, o);
  const auto m = eng.memory();
  const auto p = cuda_engine::plan(*dev, c, o);
  EXPECT_EQ(p.weights, m.weights);
  EXPECT_EQ(p.kv_cache, m.kv_cache);
  EXPECT_EQ(p.activations, m.activations);
  std::vector<std::int32_t> ids(16);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37 + 11) % static_cast<std::size_t>(c.vocab));
  const auto run = [&] {
    (void)eng.prefill(ids, 8);
    std::vector<std::vector<std::int32_t>> out{eng.read_ids()};
    for (int s = 0; s < 6; ++s) {
      if (s % 2) eng.decode_graph();
      else eng.decode_device();
      out.push_back(eng.read_ids());
    }
    return out;
  };
  const auto want = run();
  for (const auto kind : {cuda::store_kind::pinned, cuda::store_kind::disk}) {
    SCOPED_TRACE(std::string(cuda::store_kind_name(kind)));
    cuda::weight_store store(*dev, kind, eng.weights_device(), eng.weights_bytes(), file("llm"));
    eng.offload();
    EXPECT_FALSE(eng.resident());
    eng.restore();
    poison(*dev, eng.weights_device(), eng.weights_bytes());
    (void)store.load(eng.weights_device());
    EXPECT_EQ(run(), want);
  }
  eng.offload();
  eng.restore();
  poison(*dev, eng.weights_device(), eng.weights_bytes());
  EXPECT_NE(run(), want) << "poisoned weights, no load: the tokens must differ";
  cuda_engine plain(*dev, c, 7, engine_options{.batch = 1, .max_context = 8});
  EXPECT_THROW(plain.offload(), std::logic_error);
}

// The pipeline workload on the device, end to end from files: staged (weights from pinned memory
// and from disk) generates what resident generates, with its load and unload stages timed, and
// plans less memory. Then R12 on real shapes (CLIP-336 and llama-3.2-1b): in an envelope where
// resident fits fewer requests than staged, the larger batch runs staged and is refused resident.
TEST_F(residency_device, pipeline_staged_matches_resident_and_buys_a_larger_batch) {
  const auto& w = builtin_workloads().get("multimodal");
  const auto run = [&](axis_overrides extra) {
    const axis_overrides base = {{"encoder", "tiny"}, {"model", "tiny"}, {"resolution", "48"}, {"batch", "2"},
                                 {"prompt", "6"},     {"output", "4"},   {"loop", "end_to_end"}};
    return test::run_single_case(w, test::merged(base, extra), "cuda");
  };
  const auto generations = [](const case_record& r) {
    std::ifstream in(r.details.at("files.generations"));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const auto metric = [](const case_record& r, const std::string& name) {
    const auto* m = r.find_metric(name);
    return m ? m->value : -1.0;
  };
  const auto resident = run({});
  ASSERT_EQ(resident.status, case_status::ok) << resident.message;
  const std::string want = generations(resident);
  ASSERT_FALSE(want.empty());
  for (const char* from : {"pinned", "disk"}) {
    SCOPED_TRACE(from);
    const auto staged = run({{"residency", "staged"}, {"weights_from", from}});
    ASSERT_EQ(staged.status, case_status::ok) << staged.message;
    EXPECT_EQ(generations(staged), want);
    for (const char* s : {"load_encoder", "unload_encoder", "load_language_model", "unload_language_model"}) {
      const stage_record* x = staged.find_stage(s);
      ASSERT_NE(x, nullptr) << s;
      EXPECT_GT(x->host_ns, 0) << s;
    }
    EXPECT_GT(staged.find_stage("load_language_model")->bytes_read, 0);
    EXPECT_LT(metric(staged, "memory/plan/total"), metric(resident, "memory/plan/total"));
    EXPECT_LT(metric(staged, "memory/measured_peak"), metric(resident, "memory/measured_peak"));
    EXPECT_GE(metric(staged, "memory/largest_batch/staged"), metric(staged, "memory/largest_batch/resident"));
    if (std::string(from) == "disk") EXPECT_GE(metric(staged, "residency/disk_cached_fraction"), 0.0);
  }

  // R12 on real shapes, compute loop, prompt 16, output 4, envelope 4 GiB.
  const axis_overrides real = {{"encoder", "clip-vit-large-patch14-336"}, {"model", "llama-3.2-1b"}, {"prompt", "16"},
                               {"loop", "compute"}, {"envelope", "4"}, {"resolution", "336"}};
  auto probe = real;
  probe.push_back({"batch", "1"});
  const auto first = run(probe);
  ASSERT_EQ(first.status, case_status::ok) << first.message;
  const auto fit_resident = static_cast<std::int64_t>(metric(first, "memory/largest_batch/resident"));
  const auto fit_staged = static_cast<std::int64_t>(metric(first, "memory/largest_batch/staged"));
  std::printf("envelope 4 GiB: largest batch resident %lld, staged %lld\n", static_cast<long long>(fit_resident),
              static_cast<long long>(fit_staged));
  ASSERT_GT(fit_staged, fit_resident);
  auto larger = real;
  larger.push_back({"batch", std::to_string(fit_staged)});
  const auto refused = run(larger);
  EXPECT_EQ(refused.status, case_status::skipped);
  EXPECT_NE(refused.message.find("or residency=staged"), std::string::npos) << refused.message;
  larger.push_back({"residency", "staged"});
  const auto runs = run(larger);
  ASSERT_EQ(runs.status, case_status::ok) << runs.message;
  // The plan (models, image buffers, workspace) and what the allocator really held, the workspace
  // included, both inside the envelope and within 5% of each other.
  const double envelope = 4.0 * (1 << 30), plan = metric(runs, "memory/plan/total");
  const double peak = metric(runs, "memory/measured_peak");
  std::printf("staged batch %lld in 4 GiB: plan %.0f B, measured peak %.0f B\n", static_cast<long long>(fit_staged),
              plan, peak);
  EXPECT_LE(plan, envelope);
  EXPECT_LE(peak, envelope);
  EXPECT_NEAR(peak, plan, 0.05 * plan);
}

#endif

}  // namespace
