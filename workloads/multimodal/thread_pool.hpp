#pragma once
// A fixed set of worker threads (std::jthread) that runs one batch of items at a time: the decode
// stage's pool, sized to the cores by default. Items are handed out one at a time from a shared
// counter, so a slow image (a 2048x2048 PNG) does not hold up a worker's share of small ones.
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

namespace itera::mm {

class thread_pool {
 public:
  // `threads` workers, at least 1 (std::invalid_argument for 0).
  explicit thread_pool(std::size_t threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  std::size_t size() const { return m_workers.size(); }

  // Runs task(item, worker) for every item in [0, count) on the workers (never on the calling
  // thread) and returns when all have finished. `worker` is in [0, size()): per-worker state (a
  // decoder handle) can be indexed by it. If a task throws, the workers stop taking new items and
  // the first exception is rethrown here; tasks that must not stop the batch catch their own.
  // One batch at a time: a second caller waits for the first batch to finish.
  void for_each(std::size_t count, const std::function<void(std::size_t item, std::size_t worker)>& task);

  // 1 when the standard library cannot tell.
  static std::size_t hardware_threads();

 private:
  void work(std::stop_token stop, std::size_t worker);

  std::mutex m_batch_mutex;  // one for_each at a time
  std::mutex m_mutex;
  std::condition_variable_any m_wake;
  std::condition_variable m_done;
  const std::function<void(std::size_t, std::size_t)>* m_task = nullptr;
  std::size_t m_count = 0;
  std::size_t m_next = 0;         // next item to hand out (under m_mutex)
  std::size_t m_generation = 0;   // bumped per batch
  std::size_t m_finished = 0;     // workers done with the current batch
  std::exception_ptr m_failure;
  std::vector<std::jthread> m_workers;
};

}  // namespace itera::mm
