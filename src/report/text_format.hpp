#pragma once
// Text for people, shared by the result writers and the comparison report (internal header). Every
// number goes through fmt with a fixed format so golden files stay byte-stable.
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "itera/analysis/precision.hpp"
#include "itera/core/result.hpp"

namespace itera::report {

// ---------------------------------------------------------------------------------------------
// Numbers

// Three significant digits: "0.0123", "1.23", "12.3", "123", "12300"; "nan", "inf", "-inf".
std::string sig3(double v);
// Nanoseconds in ns, us, ms or s, the unit chosen on the rounded value: 999.7 ns is "1.00 us".
// "-" when not finite.
std::string human_time_ns(double ns);
// Bytes in B, KiB, MiB or GiB.
std::string human_bytes(double b);
// "B/s" in GB/s (TB/s from 1 TB/s), "FLOP/s" in TFLOP/s (GFLOP/s below 1 TFLOP/s); any other unit
// as sig3 followed by the unit.
std::string human_rate(double v, const std::string& unit);
// For machine formats: the shortest text that reads back to the same double.
std::string exact(double v);

// ---------------------------------------------------------------------------------------------
// Strings

std::string joined(const std::vector<std::string>& items, const char* separator);
// Escapes & < > " ' for HTML text and attribute values (the HTML report, the desk's pages).
std::string html_escape(std::string_view text);
std::string short_commit(const std::string& commit);  // first 12 characters, and "-dirty" if it has it

// The first of `keys` in `obj` whose value is a non-empty scalar, as text; "" when none is.
std::string string_at(const ojson& obj, std::initializer_list<const char*> keys);
// The catalogue match of a device fingerprint: an object with a name (or id), a bare string, or
// null when nothing matched (""); "" too when the device has no variant.
std::string variant_name(const ojson& device);
// The host's CPU model under whichever key the host fingerprint uses; "" when none.
std::string cpu_name(const ojson& host);

// ---------------------------------------------------------------------------------------------
// Markdown

// Escapes '|' and turns line breaks into spaces, so any text fits in a table cell or list item.
std::string md_cell(const std::string& s);

// A table padded so the raw text reads as a table too; numeric columns are right-aligned.
struct md_table {
  std::vector<std::string> header;
  std::vector<bool> right;
  std::vector<std::vector<std::string>> rows;

  void column(std::string name, bool numeric);
  void write(std::ostream& out) const;
};

// "title\n\n- item\n...\n\n", items escaped with md_cell; nothing when there are no items.
void write_list(std::ostream& out, const std::string& title, const std::vector<std::string>& items);

// Documents are built from blocks that each end with a blank line; this writes one ending in
// exactly one newline.
void write_document(std::ostream& out, std::string text);

// A precision_speedups row as both reports' tables show it: the columns' names (numeric or not),
// then a row's cells in that order.
struct table_column {
  const char* name;
  bool numeric;
};
const std::vector<table_column>& precision_columns();
std::vector<std::string> precision_cells(const precision_row& r);

}  // namespace itera::report
