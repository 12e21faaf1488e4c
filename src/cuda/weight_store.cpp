// weight_store.hpp: the weights of an engine that is not resident, in page-locked host memory or in
// a file.
#include "src/cuda/weight_store.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "itera/cuda/check.hpp"
#include "src/cuda/cuda_backend_impl.hpp"
#include "src/cuda/memory.hpp"

namespace itera::cuda {
namespace {

constexpr std::size_t chunk_bytes = std::size_t{64} << 20;

[[noreturn]] void fail(const std::filesystem::path& file, const char* what, int error) {
  std::string hint;
  if (error == ENOSPC || error == EDQUOT)
    hint = "; the weights need that much free space in the scratch folder: point TMPDIR at a disk with room, or use "
           "weights_from=pinned";
  else if (error == EACCES || error == EROFS)
    hint = "; make the scratch folder writable (TMPDIR), or use weights_from=pinned";
  throw std::runtime_error("weight store " + file.string() + ": " + what + " failed: " + std::strerror(error) + hint);
}

// A file descriptor closed on scope exit.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) (void)::close(fd);
  }
};

// The share of `file`'s pages in the page cache (mincore over a read-only mapping).
double cached_share(int fd, std::uint64_t bytes) {
  if (bytes == 0) return 0;
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return -1;
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::size_t pages = (bytes + static_cast<std::uint64_t>(page) - 1) / static_cast<std::uint64_t>(page);
  std::vector<unsigned char> in(pages);
  double share = -1;
  if (::mincore(map, bytes, in.data()) == 0) {
    std::size_t cached = 0;
    for (const unsigned char v : in) cached += v & 1u;
    share = static_cast<double>(cached) / static_cast<double>(pages);
  }
  (void)::munmap(map, bytes);
  return share;
}

}  // namespace

std::string_view store_kind_name(store_kind k) { return k == store_kind::pinned ? "pinned" : "disk"; }

struct weight_store::impl {
  cuda_backend& dev;
  store_kind kind;
  std::uint64_t bytes;
  std::filesystem::path file;
  pinned_buffer host;        // pinned: the block; disk: two chunk_bytes bounce buffers
  cudaEvent_t done[2]{};     // disk: each bounce buffer's last copy

  impl(backend& d, store_kind k, std::uint64_t n, std::filesystem::path f)
      : dev(as_cuda(d)), kind(k), bytes(n), file(std::move(f)) {}

  ~impl() {
    for (cudaEvent_t e : done)
      if (e) (void)cudaEventDestroy(e);
    if (kind == store_kind::disk && !file.empty()) {
      std::error_code ec;
      std::filesystem::remove(file, ec);
    }
  }

  void write_file(const void* src) {
    fd_guard f{::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
    if (f.fd < 0) fail(file, "open for writing", errno);
    auto* bounce = static_cast<unsigned char*>(host.data());
    for (std::uint64_t at = 0; at < bytes; at += chunk_bytes) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, bytes - at));
      ITERA_CUDA_CHECK(cudaMemcpy(bounce, static_cast<const unsigned char*>(src) + at, n, cudaMemcpyDeviceToHost));
      for (std::size_t put = 0; put < n;) {
        const ssize_t w = ::pwrite(f.fd, bounce + put, n - put, static_cast<off_t>(at + put));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) fail(file, "write", errno);
        if (w == 0) fail(file, "write", ENOSPC);  // nothing written and no error: the disk is full
        put += static_cast<std::size_t>(w);
      }
    }
    if (::fdatasync(f.fd) != 0) fail(file, "fdatasync", errno);
  }

  store_load read_file(void* dst) {
    fd_guard f{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0) fail(file, "open for reading", errno);
    (void)::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
    store_load r;
    r.bytes = bytes;
    r.cached_fraction = cached_share(f.fd, bytes);
    (void)::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    auto* bounce = static_cast<unsigned char*>(host.data());
    try {
      copy_chunks(f.fd, bounce, dst);
    } catch (...) {
      // A copy from a bounce buffer may still be in flight: let it land before anything is freed.
      (void)cudaStreamSynchronize(dev.stream());
      throw;
    }
    ITERA_CUDA_CHECK(cudaStreamSynchronize(dev.stream()));
    return r;
  }

  // The file's bytes into dst through the two bounce buffers in turn.
  void copy_chunks(int fd, unsigned char* bounce, void* dst) {
    int k = 0;
    for (std::uint64_t at = 0; at < bytes; at += chunk_bytes, k ^= 1) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_bytes, bytes - at));
      unsigned char* buf = bounce + static_cast<std::size_t>(k) * chunk_bytes;
      ITERA_CUDA_CHECK(cudaEventSynchronize(done[k]));  // this buffer's previous copy has finished
      for (std::size_t got = 0; got < n;) {
        const ssize_t g = ::pread(fd, buf + got, n - got, static_cast<off_t>(at + got));
        if (g < 0 && errno == EINTR) continue;
        if (g < 0) fail(file, "read", errno);
        if (g == 0) throw std::runtime_error("weight store " + file.string() + ": the file is shorter than the " +
                                             std::to_string(bytes) + " bytes written (changed by something else?)");
        got += static_cast<std::size_t>(g);
      }
      ITERA_CUDA_CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(dst) + at, buf, n, cudaMemcpyHostToDevice, dev.stream()));
      ITERA_CUDA_CHECK(cudaEventRecord(done[k], dev.stream()));
    }
  }
};

weight_store::weight_store(backend& dev, store_kind kind, const void* src, std::uint64_t bytes, std::filesystem::path file)
    : m(std::make_unique<impl>(dev, kind, bytes, std::move(file))) {
  if (kind == store_kind::disk && m->file.empty()) throw std::invalid_argument("weight store on disk: no file given");
  m->dev.make_current();
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m->dev.stream()));
  if (kind == store_kind::pinned) {
    m->host = pinned_buffer(static_cast<std::size_t>(bytes));
    ITERA_CUDA_CHECK(cudaMemcpy(m->host.data(), src, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToHost));
    return;
  }
  m->host = pinned_buffer(2 * chunk_bytes);
  for (cudaEvent_t& e : m->done) ITERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  m->write_file(src);
}

weight_store::~weight_store() = default;

store_load weight_store::load(void* dst) {
  m->dev.make_current();
  if (m->kind == store_kind::disk) return m->read_file(dst);
  ITERA_CUDA_CHECK(cudaMemcpyAsync(dst, m->host.data(), static_cast<std::size_t>(m->bytes), cudaMemcpyHostToDevice,
                                   m->dev.stream()));
  ITERA_CUDA_CHECK(cudaStreamSynchronize(m->dev.stream()));
  return {m->bytes, -1};
}

store_kind weight_store::kind() const { return m->kind; }
std::uint64_t weight_store::bytes() const { return m->bytes; }
const std::filesystem::path& weight_store::file() const { return m->file; }

}  // namespace itera::cuda
