// The card catalogue (data/catalogue.json, compiled into the binary) and the match from what NVML
// reports to the exact card variant.
#include "itera/env/catalogue.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "itera/core/errors.hpp"

namespace itera {

extern const char* const builtin_catalogue_json;  // build/generated/catalogue_data.cpp

namespace {

constexpr const char* schema = "itera.catalogue/1";
// Formats every card must state (a number, or null where the hardware has no tensor-core path).
constexpr const char* required_formats[] = {"fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "int8"};

// NVML's total memory in GiB sits a few percent under the nominal decimal GB a card is sold with
// (H200: 140.4 GiB for 141 GB; H100 NVL: 93.6 GiB for 94 GB; L40S with ECC: 45 GiB for 48 GB).
constexpr double memory_fit_low = 0.85;
constexpr double memory_fit_high = 1.05;

class card_reader {
 public:
  card_reader(const nlohmann::ordered_json& j, std::size_t index) : m_j(j), m_index(index) {
    if (j.is_object()) {
      if (auto it = j.find("id"); it != j.end() && it->is_string()) m_id = it->get<std::string>();
    }
  }

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    const std::string who = m_id.empty() ? fmt::format("card {}", m_index)
                                         : fmt::format("card {} (\"{}\")", m_index, m_id);
    throw input_error(fmt::format("catalogue: {}: field \"{}\" {}", who, field, problem));
  }

  const nlohmann::ordered_json& field(const char* name) const {
    const auto it = m_j.find(name);
    if (it == m_j.end()) fail(name, "is missing");
    return *it;
  }

  std::string text(const char* name) const {
    const auto& v = field(name);
    if (!v.is_string() || v.get<std::string>().empty()) fail(name, "must be a non-empty string");
    return v.get<std::string>();
  }

  double positive(const char* name) const {
    const auto& v = field(name);
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      fail(name, "must be a number > 0");
    }
    return v.get<double>();
  }

  int positive_int(const char* name) const {
    const auto& v = field(name);
    if (!v.is_number_integer() || v.get<long long>() <= 0) fail(name, "must be an integer > 0");
    return v.get<int>();
  }

 private:
  const nlohmann::ordered_json& m_j;
  std::size_t m_index;
  std::string m_id;
};

catalogue_card read_card(const nlohmann::ordered_json& j, std::size_t index) {
  card_reader r(j, index);
  if (!j.is_object()) r.fail("(card)", "must be an object");
  catalogue_card c;
  c.id = r.text("id");
  c.name = r.text("name");
  c.architecture = r.text("architecture");
  c.compute_capability = r.positive_int("compute_capability");
  c.form_factor = r.text("form_factor");
  c.memory_gb = r.positive("memory_gb");
  c.memory_type = r.text("memory_type");
  c.bandwidth_gbs = r.positive("bandwidth_gbs");
  c.tdp_w = r.positive("tdp_w");
  c.interconnect = r.text("interconnect");
  c.source = r.text("source");

  const auto& peaks = r.field("dense_tflops");
  if (!peaks.is_object()) r.fail("dense_tflops", "must be an object of format -> TFLOP/s");
  for (const char* format : required_formats) {
    if (!peaks.contains(format)) r.fail(fmt::format("dense_tflops.{}", format), "is missing (use null when unsupported)");
  }
  for (const auto& [format, value] : peaks.items()) {
    if (value.is_null()) continue;  // the hardware has no tensor-core path for this format
    if (!value.is_number() || !(value.get<double>() > 0)) {
      r.fail(fmt::format("dense_tflops.{}", format), "must be a number > 0 or null");
    }
    c.dense_tflops[format] = value.get<double>();
  }

  const auto& names = r.field("nvml_names");
  if (!names.is_array() || names.empty()) r.fail("nvml_names", "must be a non-empty array of strings");
  for (const auto& n : names) {
    if (!n.is_string() || n.get<std::string>().empty()) r.fail("nvml_names", "must hold non-empty strings");
    c.nvml_names.push_back(n.get<std::string>());
  }
  return c;
}

std::string id_list(const std::vector<const catalogue_card*>& cards) {
  std::string s;
  for (const auto* c : cards) s += (s.empty() ? "" : ", ") + c->id;
  return s;
}

}  // namespace

catalogue catalogue::from_json(const nlohmann::ordered_json& j) {
  if (!j.is_object()) throw input_error("catalogue: the document must be a JSON object");
  const auto s = j.find("schema");
  if (s == j.end() || !s->is_string() || s->get<std::string>() != schema) {
    throw input_error(fmt::format("catalogue: field \"schema\" must be \"{}\"", schema));
  }
  const auto cards = j.find("cards");
  if (cards == j.end() || !cards->is_array() || cards->empty()) {
    throw input_error("catalogue: field \"cards\" must be a non-empty array");
  }
  catalogue cat;
  std::set<std::string> ids;
  for (std::size_t i = 0; i < cards->size(); ++i) {
    catalogue_card c = read_card((*cards)[i], i);
    if (!ids.insert(c.id).second) {
      throw input_error(fmt::format("catalogue: card {} (\"{}\"): field \"id\" repeats an earlier card's id", i, c.id));
    }
    cat.m_cards.push_back(std::move(c));
  }
  return cat;
}

const catalogue& catalogue::builtin() {
  static const catalogue cat = [] {
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(builtin_catalogue_json);
    } catch (const nlohmann::json::parse_error& e) {
      throw input_error(std::string("catalogue: data/catalogue.json (built in) is not valid JSON: ") + e.what());
    }
    return from_json(j);
  }();
  return cat;
}

const catalogue_card* catalogue::find(const std::string& id) const {
  const auto it = std::find_if(m_cards.begin(), m_cards.end(), [&](const catalogue_card& c) { return c.id == id; });
  return it == m_cards.end() ? nullptr : &*it;
}

const catalogue_card* catalogue::match(const std::string& nvml_name, double memory_gib, double power_limit_w,
                                       std::string* why) const {
  const auto say = [why](std::string text) {
    if (why != nullptr) *why = std::move(text);
  };
  std::vector<const catalogue_card*> named;
  for (const auto& c : m_cards) {
    if (std::find(c.nvml_names.begin(), c.nvml_names.end(), nvml_name) != c.nvml_names.end()) named.push_back(&c);
  }
  if (named.empty()) {
    say(fmt::format("no catalogue card lists the NVML name \"{}\"", nvml_name));
    return nullptr;
  }
  if (named.size() == 1) {
    say(fmt::format("NVML name \"{}\"", nvml_name));
    return named.front();
  }

  // Several variants report this name: memory size first, then the board's power ceiling.
  std::string reasoning = fmt::format("NVML name \"{}\" is shared by {}", nvml_name, id_list(named));
  std::vector<const catalogue_card*> left = named;
  if (memory_gib > 0) {
    std::vector<const catalogue_card*> fits;
    for (const auto* c : left) {
      if (memory_gib >= memory_fit_low * c->memory_gb && memory_gib <= memory_fit_high * c->memory_gb) fits.push_back(c);
    }
    if (fits.empty()) {
      say(reasoning + fmt::format("; none has memory matching {:.1f} GiB", memory_gib));
      return nullptr;
    }
    if (fits.size() < left.size()) {
      reasoning += fmt::format("; {:.1f} GiB of memory leaves {}", memory_gib, id_list(fits));
      left = std::move(fits);
    }
  }
  if (left.size() > 1 && power_limit_w > 0) {
    // A board's power limit cannot exceed its TDP, so the limit rules out every variant with a
    // smaller TDP; of the rest, the one with the smallest TDP is the board that has this ceiling
    // (H200 NVL caps at 600 W, H200 SXM goes to 700 W). 1% slack absorbs milliwatt rounding.
    std::vector<const catalogue_card*> admits;
    for (const auto* c : left) {
      if (c->tdp_w >= power_limit_w * 0.99) admits.push_back(c);
    }
    if (admits.empty()) {
      say(reasoning + fmt::format("; power limit {:.0f} W exceeds the TDP of every one", power_limit_w));
      return nullptr;
    }
    std::sort(admits.begin(), admits.end(), [](const auto* a, const auto* b) { return a->tdp_w < b->tdp_w; });
    if (admits.size() == 1 || admits[0]->tdp_w < admits[1]->tdp_w) {
      say(reasoning + fmt::format("; power limit {:.0f} W picks {} (TDP {:.0f} W)", power_limit_w, admits[0]->id,
                                  admits[0]->tdp_w));
      return admits[0];
    }
    reasoning += fmt::format("; power limit {:.0f} W does not separate them", power_limit_w);
  }
  if (left.size() == 1) {
    say(reasoning);
    return left.front();
  }
  say(reasoning + "; ambiguous without a distinguishing memory size or power limit");
  return nullptr;
}

}  // namespace itera
