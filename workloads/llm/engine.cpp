#include "workloads/llm/engine.hpp"

#include <fmt/format.h>

#include "itera/core/errors.hpp"

namespace itera::llm {

void check_embedding_rows(std::span<const std::int64_t> rows, std::int64_t staged, const char* who) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= staged)
      throw usage_error(fmt::format("{}: embedding row {} is outside the {} staged prompt rows (stage the prompts "
                                    "first, then their embeddings)",
                                    who, rows[i], staged));
    if (i > 0 && rows[i] <= rows[i - 1])
      throw usage_error(fmt::format("{}: embedding rows must be strictly increasing; row {} follows {}", who, rows[i],
                                    rows[i - 1]));
  }
}

}  // namespace itera::llm
