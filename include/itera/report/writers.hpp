#pragma once
// Writers only render results; they never measure. Golden-file tests pin their output.
#include <iosfwd>
#include <string>
#include <vector>

#include "itera/core/result.hpp"

namespace itera {

enum class output_format { md, csv, json };
output_format parse_output_format(const std::string& name);  // usage_error naming md|csv|json

// Markdown: a short context header (card, backend, commit), then per workload one table whose
// columns are the axes that vary plus the headline numbers (llama-bench: constant columns move to
// the header). Failed and skipped cases appear with their message.
void write_markdown(std::ostream& out, const std::vector<result_set>& sets);

// CSV: one row per case with every axis, recipe field and statistic; RFC 4180 quoting.
void write_csv(std::ostream& out, const std::vector<result_set>& sets);

// JSON: one document {"schema", "results": [{"context", "ceilings", "cases"}]}.
void write_json(std::ostream& out, const std::vector<result_set>& sets);

void write_results(std::ostream& out, output_format f, const std::vector<result_set>& sets);

// Human-readable `itera env` rendering.
void write_env_markdown(std::ostream& out, const ojson& env);

}  // namespace itera
