// The GPU preprocessing stage (preprocess_gpu.hpp): two kernels per batch.
//   resize_rows: PIL's horizontal pass over the rows the vertical pass reads, uint8 out;
//   resize_cols_normalise: the vertical pass at each view pixel, then the per-channel table, written
//     as NCHW float32 and as patchified bf16.
// Integer arithmetic as the reference: 32-bit sums of uint8 x fixed-point weights from 2^21, shifted
// by 22 (arithmetic), clamped to [0, 255].
#include "workloads/multimodal/preprocess_gpu.hpp"

#include <cuda_runtime.h>

#include <stdexcept>


#include "itera/cuda/check.hpp"
#include "itera/cuda/cuda_backend.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/memory.hpp"

namespace itera::mm {

namespace {

// One resize of one image: input pixels, output size, the rows of the input the vertical pass
// reads, and where its tables and intermediate rows live.
struct resize_job {
  std::uint64_t in_offset;   // bytes into the pixel buffer
  std::uint64_t tmp_offset;  // bytes into the intermediate buffer
  std::int32_t in_w, in_h, out_w, out_h;
  std::int32_t row_first, rows;     // input rows [row_first, row_first + rows) the horizontal pass covers
  std::int32_t h_table, h_ksize;    // offsets (in ints) into the tables buffer: first, count, then k
  std::int32_t v_table, v_ksize;
};

// One output view: a S x S window of a job's resized image.
struct view_job {
  std::int32_t job, left, top;
};

constexpr int shift = resample_precision_bits;

__device__ __forceinline__ std::uint8_t clip8(std::int32_t acc) {
  const std::int32_t v = acc >> shift;
  return static_cast<std::uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// grid: (ceil(out_w / 128), max rows, jobs); block 128: one output pixel (3 channels) per thread.
__global__ void resize_rows(const resize_job* jobs, const std::uint8_t* pixels, const std::int32_t* tables,
                            std::uint8_t* tmp) {
  const resize_job j = jobs[blockIdx.z];
  const int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int y = static_cast<int>(blockIdx.y);
  if (x >= j.out_w || y >= j.rows) return;
  const std::int32_t* first = tables + j.h_table;
  const std::int32_t* count = first + j.out_w;
  const std::int32_t* k = count + j.out_w + static_cast<std::size_t>(x) * j.h_ksize;
  const std::uint8_t* row = pixels + j.in_offset + 3ull * static_cast<std::size_t>(j.row_first + y) * j.in_w;
  const int lo = first[x], n = count[x];
  std::int32_t s0 = 1 << (shift - 1), s1 = s0, s2 = s0;
  for (int i = 0; i < n; ++i) {
    const std::uint8_t* p = row + 3 * (lo + i);
    s0 += p[0] * k[i];
    s1 += p[1] * k[i];
    s2 += p[2] * k[i];
  }
  std::uint8_t* out = tmp + j.tmp_offset + 3ull * (static_cast<std::size_t>(y) * j.out_w + x);
  out[0] = clip8(s0);
  out[1] = clip8(s1);
  out[2] = clip8(s2);
}

// grid: (ceil(S*S / 256), views); block 256: one view pixel per thread.
__global__ void resize_cols_normalise(const resize_job* jobs, const view_job* views, const std::int32_t* tables,
                                      const std::uint8_t* tmp, const float* lut, const std::uint16_t* lut_bf16,
                                      int side, int patch, float* nchw, std::uint16_t* patches) {
  const view_job vj = views[blockIdx.y];
  const resize_job j = jobs[vj.job];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= side * side) return;
  const int x = i % side, y = i / side;
  const int X = vj.left + x, Y = vj.top + y;  // in the resized image
  const std::int32_t* first = tables + j.v_table;
  const std::int32_t* count = first + j.out_h;
  const std::int32_t* k = count + j.out_h + static_cast<std::size_t>(Y) * j.v_ksize;
  const int lo = first[Y] - j.row_first, n = count[Y];
  const std::uint8_t* col = tmp + j.tmp_offset + 3ull * X;
  const std::size_t stride = 3ull * j.out_w;
  std::int32_t s0 = 1 << (shift - 1), s1 = s0, s2 = s0;
  for (int t = 0; t < n; ++t) {
    const std::uint8_t* p = col + static_cast<std::size_t>(lo + t) * stride;
    s0 += p[0] * k[t];
    s1 += p[1] * k[t];
    s2 += p[2] * k[t];
  }
  const std::uint8_t v[3] = {clip8(s0), clip8(s1), clip8(s2)};
  const std::size_t plane = static_cast<std::size_t>(side) * side;
  const std::size_t view = blockIdx.y;
  for (int c = 0; c < 3; ++c) nchw[(view * 3 + c) * plane + static_cast<std::size_t>(y) * side + x] = lut[c * 256 + v[c]];
  // Whole patches only: G = floor(S / P), the last S mod P rows and columns are not patches.
  const int grid = side / patch;
  if (x >= grid * patch || y >= grid * patch) return;
  const std::size_t p = static_cast<std::size_t>(y / patch) * grid + x / patch;
  const std::size_t pp = static_cast<std::size_t>(patch) * patch;
  for (int c = 0; c < 3; ++c)
    patches[(view * grid * grid + p) * 3 * pp + c * pp + (y % patch) * patch + (x % patch)] = lut_bf16[c * 256 + v[c]];
}

// A device buffer that grows to the largest request.
void reserve(cuda::device_buffer& b, std::size_t bytes, cuda::cuda_backend& dev) {
  if (b.bytes() >= bytes && b.data()) return;
  b = dev.allocate(std::max<std::size_t>(bytes, 256));
}

// The resize jobs, views and weight tables of a call (host side only; run() uploads them).
struct call_plan {
  std::vector<resize_job> jobs;
  std::vector<view_job> views;
  std::vector<std::int32_t> tables;
  std::uint64_t tmp_bytes = 0;
  int max_rows = 1, max_w = 1;
};

call_plan plan_call(const preprocess_config& c, const std::vector<gpu_preprocessor::device_image>& images) {
  call_plan result;
  const int s = static_cast<int>(c.image_size);
  auto& jobs = result.jobs;
  auto& views = result.views;
  auto& tables = result.tables;
  auto& tmp_bytes = result.tmp_bytes;
  auto& max_rows = result.max_rows;
  auto& max_w = result.max_w;
  const auto add_table = [&](const resample_weights& w, int out) {
    const auto at = static_cast<std::int32_t>(tables.size());
    tables.insert(tables.end(), w.first.begin(), w.first.end());
    tables.insert(tables.end(), w.count.begin(), w.count.end());
    tables.insert(tables.end(), w.k.begin(), w.k.begin() + static_cast<std::ptrdiff_t>(out) * w.ksize);
    return at;
  };
  for (const gpu_preprocessor::device_image& im : images) {
    const gpu_preprocessor::device_image* img = &im;
    const std::uint64_t image_offset = im.offset;
    const auto add_job = [&](int out_w, int out_h) {
      resize_job j{};
      j.in_offset = image_offset;
      j.in_w = static_cast<int>(img->width);
      j.in_h = static_cast<int>(img->height);
      j.out_w = out_w;
      j.out_h = out_h;
      const auto h = bicubic_weights(j.in_w, out_w);
      const auto v = bicubic_weights(j.in_h, out_h);
      j.row_first = v.first[0];
      j.rows = v.first[out_h - 1] + v.count[out_h - 1] - j.row_first;
      j.h_table = add_table(h, out_w);
      j.h_ksize = h.ksize;
      j.v_table = add_table(v, out_h);
      j.v_ksize = v.ksize;
      j.tmp_offset = tmp_bytes;
      tmp_bytes += 3ull * j.rows * out_w;
      max_rows = std::max(max_rows, j.rows);
      max_w = std::max(max_w, out_w);
      jobs.push_back(j);
      return static_cast<int>(jobs.size() - 1);
    };
    if (c.mode == resize_mode::crop) {
      const auto [w, h] = shortest_side_size(img->width, img->height, c.image_size);
      const int job = add_job(static_cast<int>(w), static_cast<int>(h));
      views.push_back({job, (static_cast<int>(w) - s) / 2, (static_cast<int>(h) - s) / 2});
    } else {
      const auto grid = choose_tile_grid(img->width, img->height, c);
      const int job = add_job(static_cast<int>(grid.columns) * s, static_cast<int>(grid.rows) * s);
      for (std::uint32_t t = 0; t < grid.columns * grid.rows; ++t)
        views.push_back({job, static_cast<int>(t % grid.columns) * s, static_cast<int>(t / grid.columns) * s});
      if (c.thumbnail && grid.columns * grid.rows > 1) views.push_back({add_job(s, s), 0, 0});
    }
  }
  return result;
}

}  // namespace

struct gpu_preprocessor::impl {
  cuda::cuda_backend* dev = nullptr;
  preprocess_config config;
  cuda::device_buffer pixels, tmp, tables, jobs, view_jobs, lut, lut_bf16, nchw, patches;
  std::size_t views = 0, uploaded = 0;
};

gpu_preprocessor::gpu_preprocessor(backend& dev, const preprocess_config& config) : m(std::make_unique<impl>()) {
  validate(config);
  m->dev = &cuda::as_cuda(dev);
  m->config = config;
  // The normalisation tables: the reference's own (normalise_table), and their bf16 roundings.
  const std::vector<float> lut = normalise_table(config);
  const std::vector<std::uint16_t> lut_bf16 = to_bf16(lut);
  m->lut = m->dev->allocate(lut.size() * sizeof(float));
  m->lut_bf16 = m->dev->allocate(lut_bf16.size() * sizeof(std::uint16_t));
  m->dev->upload(m->lut.data(), lut.data(), lut.size() * sizeof(float));
  m->dev->upload(m->lut_bf16.data(), lut_bf16.data(), lut_bf16.size() * 2);
}

gpu_preprocessor::~gpu_preprocessor() = default;

std::size_t gpu_preprocessor::enqueue(const std::vector<const rgb_image*>& images) {
  std::vector<device_image> shapes;
  std::uint64_t in_bytes = 0;
  for (const rgb_image* img : images) {
    if (!img || img->width == 0 || img->height == 0 || img->pixels.size() != 3ull * img->width * img->height)
      throw std::invalid_argument("gpu preprocess: an image is empty or its buffer does not match its size");
    shapes.push_back({img->width, img->height, in_bytes});
    in_bytes += img->pixels.size();
  }
  auto& dev = *m->dev;
  reserve(m->pixels, in_bytes, dev);
  auto* px = static_cast<std::uint8_t*>(m->pixels.data());
  for (std::size_t i = 0; i < images.size(); ++i)
    ITERA_CUDA_CHECK(cudaMemcpyAsync(px + shapes[i].offset, images[i]->pixels.data(), images[i]->pixels.size(),
                                     cudaMemcpyHostToDevice, dev.stream()));
  const std::size_t views = run(px, shapes);
  m->uploaded += in_bytes;
  return views;
}

std::size_t gpu_preprocessor::enqueue_device(const std::uint8_t* pixels, const std::vector<device_image>& images) {
  for (const auto& im : images)
    if (im.width == 0 || im.height == 0)
      throw std::invalid_argument("gpu preprocess: an image on the device has no pixels");
  return run(pixels, images);
}

std::size_t gpu_preprocessor::run(const std::uint8_t* px, const std::vector<device_image>& images) {
  auto& dev = *m->dev;
  const preprocess_config& c = m->config;
  const int s = static_cast<int>(c.image_size);
  const call_plan plan = plan_call(c, images);
  const auto& jobs = plan.jobs;
  const auto& views = plan.views;
  const auto& tables = plan.tables;
  const std::uint64_t tmp_bytes = plan.tmp_bytes;
  const int max_rows = plan.max_rows, max_w = plan.max_w;
  if (views.empty()) {
    m->views = 0;
    m->uploaded = 0;
    return 0;
  }
  reserve(m->tmp, tmp_bytes, dev);
  reserve(m->tables, tables.size() * sizeof(std::int32_t), dev);
  reserve(m->jobs, jobs.size() * sizeof(resize_job), dev);
  reserve(m->view_jobs, views.size() * sizeof(view_job), dev);
  const std::size_t plane = static_cast<std::size_t>(s) * s;
  reserve(m->nchw, views.size() * 3 * plane * sizeof(float), dev);
  reserve(m->patches, views.size() * 3 * plane * sizeof(std::uint16_t), dev);

  cudaStream_t st = dev.stream();
  ITERA_CUDA_CHECK(cudaMemcpyAsync(m->tables.data(), tables.data(), tables.size() * sizeof(std::int32_t),
                                   cudaMemcpyHostToDevice, st));
  ITERA_CUDA_CHECK(cudaMemcpyAsync(m->jobs.data(), jobs.data(), jobs.size() * sizeof(resize_job), cudaMemcpyHostToDevice, st));
  ITERA_CUDA_CHECK(cudaMemcpyAsync(m->view_jobs.data(), views.data(), views.size() * sizeof(view_job),
                                   cudaMemcpyHostToDevice, st));
  m->uploaded = tables.size() * sizeof(std::int32_t) + jobs.size() * sizeof(resize_job) + views.size() * sizeof(view_job);

  const dim3 rows_grid(static_cast<unsigned>((max_w + 127) / 128), static_cast<unsigned>(max_rows),
                       static_cast<unsigned>(jobs.size()));
  resize_rows<<<rows_grid, 128, 0, st>>>(static_cast<const resize_job*>(m->jobs.data()), px,
                                         static_cast<const std::int32_t*>(m->tables.data()),
                                         static_cast<std::uint8_t*>(m->tmp.data()));
  ITERA_CUDA_CHECK_LAUNCH();
  const dim3 cols_grid(static_cast<unsigned>((plane + 255) / 256), static_cast<unsigned>(views.size()));
  resize_cols_normalise<<<cols_grid, 256, 0, st>>>(
      static_cast<const resize_job*>(m->jobs.data()), static_cast<const view_job*>(m->view_jobs.data()),
      static_cast<const std::int32_t*>(m->tables.data()), static_cast<const std::uint8_t*>(m->tmp.data()),
      static_cast<const float*>(m->lut.data()), static_cast<const std::uint16_t*>(m->lut_bf16.data()), s,
      static_cast<int>(c.patch_size), static_cast<float*>(m->nchw.data()), static_cast<std::uint16_t*>(m->patches.data()));
  ITERA_CUDA_CHECK_LAUNCH();
  m->views = views.size();
  return views.size();
}

std::uint64_t gpu_preprocessor::device_bytes(const preprocess_config& config,
                                             const std::vector<std::pair<std::uint32_t, std::uint32_t>>& sizes,
                                             bool host_pixels) {
  validate(config);
  std::vector<device_image> images;
  std::uint64_t pixels = 0;
  for (const auto& [w, h] : sizes) {
    if (w == 0 || h == 0) throw std::invalid_argument("gpu preprocess: an image size is empty");
    images.push_back({w, h, pixels});
    pixels += 3ull * w * h;
  }
  const auto at_least = [](std::uint64_t b) { return std::max<std::uint64_t>(b, 256); };  // as reserve()
  const call_plan plan = plan_call(config, images);
  const std::uint64_t plane = static_cast<std::uint64_t>(config.image_size) * config.image_size;
  std::uint64_t total = 3 * 256 * (sizeof(float) + sizeof(std::uint16_t));  // the normalisation tables
  if (images.empty()) return total;
  if (host_pixels) total += at_least(pixels);
  total += at_least(plan.tmp_bytes) + at_least(plan.tables.size() * sizeof(std::int32_t)) +
           at_least(plan.jobs.size() * sizeof(resize_job)) + at_least(plan.views.size() * sizeof(view_job)) +
           at_least(plan.views.size() * 3 * plane * sizeof(float)) +
           at_least(plan.views.size() * 3 * plane * sizeof(std::uint16_t));
  return total;
}

std::size_t gpu_preprocessor::views() const { return m->views; }
const float* gpu_preprocessor::pixel_values() const { return static_cast<const float*>(m->nchw.data()); }
const std::uint16_t* gpu_preprocessor::patches() const { return static_cast<const std::uint16_t*>(m->patches.data()); }
std::size_t gpu_preprocessor::host_bytes_uploaded() const { return m->uploaded; }

std::vector<float> gpu_preprocessor::download_pixel_values() const {
  const std::size_t n = m->views * 3ull * m->config.image_size * m->config.image_size;
  std::vector<float> out(n);
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m->dev->stream()));
  if (n) ITERA_CUDA_CHECK(cudaMemcpy(out.data(), m->nchw.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

std::vector<std::uint16_t> gpu_preprocessor::download_patches() const {
  const std::size_t grid = m->config.image_size / m->config.patch_size;
  const std::size_t n = m->views * 3ull * grid * grid * m->config.patch_size * m->config.patch_size;
  std::vector<std::uint16_t> out(n);
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m->dev->stream()));
  if (n) ITERA_CUDA_CHECK(cudaMemcpy(out.data(), m->patches.data(), n * sizeof(std::uint16_t), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace itera::mm
