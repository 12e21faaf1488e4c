#include "workloads/multimodal/thread_pool.hpp"

#include <stdexcept>
#include <utility>

namespace itera::mm {

thread_pool::thread_pool(std::size_t threads) {
  if (threads == 0) throw std::invalid_argument("thread_pool: at least one thread");
  m_workers.reserve(threads);
  for (std::size_t w = 0; w < threads; ++w)
    m_workers.emplace_back([this, w](std::stop_token stop) { work(stop, w); });
}

thread_pool::~thread_pool() {
  for (auto& t : m_workers) t.request_stop();
  m_wake.notify_all();
  m_workers.clear();  // joins
}

std::size_t thread_pool::hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

void thread_pool::for_each(std::size_t count, const std::function<void(std::size_t, std::size_t)>& task) {
  if (count == 0) return;
  std::lock_guard batch(m_batch_mutex);
  std::unique_lock lock(m_mutex);
  m_task = &task;
  m_count = count;
  m_next = 0;
  m_finished = 0;
  m_failure = nullptr;
  ++m_generation;
  m_wake.notify_all();
  m_done.wait(lock, [&] { return m_finished == m_workers.size(); });
  m_task = nullptr;
  if (m_failure) std::rethrow_exception(std::exchange(m_failure, nullptr));
}

void thread_pool::work(std::stop_token stop, std::size_t worker) {
  std::size_t seen = 0;
  std::unique_lock lock(m_mutex);
  for (;;) {
    if (!m_wake.wait(lock, stop, [&] { return m_generation != seen; })) return;  // stop requested
    seen = m_generation;
    const auto* task = m_task;
    while (m_next < m_count && !m_failure) {
      const std::size_t item = m_next++;
      lock.unlock();
      try {
        (*task)(item, worker);
      } catch (...) {
        lock.lock();
        if (!m_failure) m_failure = std::current_exception();
        continue;
      }
      lock.lock();
    }
    if (++m_finished == m_workers.size()) m_done.notify_one();
  }
}

}  // namespace itera::mm
