// The card catalogue: the built-in data is complete and sourced, and NVML names resolve to the
// exact variant (R7: an H100 PCIe is not an H100 SXM).
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "itera/core/errors.hpp"
#include "itera/env/catalogue.hpp"

namespace {

using itera::catalogue;
using itera::input_error;
using json = nlohmann::ordered_json;

json minimal_card(const std::string& id) {
  return json{{"id", id},
              {"name", "Test card"},
              {"architecture", "Hopper"},
              {"compute_capability", 90},
              {"form_factor", "PCIe"},
              {"memory_gb", 80},
              {"memory_type", "HBM3"},
              {"bandwidth_gbs", 3000},
              {"tdp_w", 350},
              {"interconnect", "PCIe Gen5 x16"},
              {"dense_tflops",
               {{"fp32", 50}, {"tf32", 400}, {"fp16", 800}, {"bf16", 800}, {"fp8_e4m3", nullptr}, {"int8", 1600}}},
              {"nvml_names", {"Test GPU"}},
              {"source", "test"}};
}

json document(json cards) { return json{{"schema", "itera.catalogue/1"}, {"cards", std::move(cards)}}; }

std::string error_of(const json& doc) {
  try {
    catalogue::from_json(doc);
  } catch (const input_error& e) {
    return e.what();
  }
  return "(no error)";
}

// The id match() picks, or "(none)".
std::string matched(const std::string& name, double gib, double watts, std::string* why = nullptr) {
  const auto* card = catalogue::builtin().match(name, gib, watts, why);
  return card != nullptr ? card->id : "(none)";
}

TEST(Catalogue, BuiltinLoadsWithEveryFieldAndSource) {
  const auto& cards = catalogue::builtin().cards();
  ASSERT_GE(cards.size(), 12u);
  std::set<std::string> ids;
  for (const auto& c : cards) {
    SCOPED_TRACE(c.id);
    EXPECT_TRUE(ids.insert(c.id).second) << "duplicate id";
    EXPECT_FALSE(c.name.empty());
    EXPECT_FALSE(c.architecture.empty());
    EXPECT_GE(c.compute_capability, 80);
    EXPECT_FALSE(c.form_factor.empty());
    EXPECT_GT(c.memory_gb, 0);
    EXPECT_FALSE(c.memory_type.empty());
    EXPECT_GT(c.bandwidth_gbs, 0);
    EXPECT_GT(c.tdp_w, 0);
    EXPECT_FALSE(c.interconnect.empty());
    EXPECT_FALSE(c.nvml_names.empty());
    EXPECT_NE(c.source.find("https://"), std::string::npos) << "source needs the datasheet's address";
    for (const char* f : {"fp32", "tf32", "fp16", "bf16", "int8"}) {
      ASSERT_TRUE(c.dense_tflops.count(f)) << f;
      EXPECT_GT(c.dense_tflops.at(f), 0) << f;
    }
    // FP8 tensor cores arrived with Ada (8.9) and Hopper (9.0).
    EXPECT_EQ(c.dense_tflops.count("fp8_e4m3") == 1, c.compute_capability >= 89);
    // Dense tensor peaks exceed the CUDA-core fp32 peak on every card listed.
    EXPECT_GT(c.dense_tflops.at("bf16"), c.dense_tflops.at("fp32"));
  }
}

TEST(Catalogue, CoversTheCardsTheDesignNames) {
  for (const char* id : {"l4-24gb", "l40s-48gb", "a10-24gb", "a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm4-40gb",
                         "a100-sxm4-80gb", "h100-pcie-80gb", "h100-sxm5-80gb", "h100-nvl-94gb", "h200-sxm-141gb",
                         "h200-nvl-141gb"}) {
    EXPECT_NE(catalogue::builtin().find(id), nullptr) << id;
  }
  EXPECT_EQ(catalogue::builtin().find("no-such-card"), nullptr);
}

TEST(Catalogue, DatasheetFiguresSpotCheck) {
  const auto* h200 = catalogue::builtin().find("h200-sxm-141gb");
  ASSERT_NE(h200, nullptr);
  EXPECT_DOUBLE_EQ(h200->bandwidth_gbs, 4800);
  EXPECT_DOUBLE_EQ(h200->tdp_w, 700);
  EXPECT_DOUBLE_EQ(h200->dense_tflops.at("bf16"), 989.5);  // 1979 with sparsity
  EXPECT_DOUBLE_EQ(h200->dense_tflops.at("fp8_e4m3"), 1979);
  const auto* nvl = catalogue::builtin().find("h200-nvl-141gb");
  ASSERT_NE(nvl, nullptr);
  EXPECT_DOUBLE_EQ(nvl->tdp_w, 600);
  const auto* l40s = catalogue::builtin().find("l40s-48gb");
  ASSERT_NE(l40s, nullptr);
  EXPECT_DOUBLE_EQ(l40s->bandwidth_gbs, 864);
  EXPECT_EQ(l40s->compute_capability, 89);
}

TEST(CatalogueMatch, H200SxmByPowerLimit) {
  std::string why;
  EXPECT_EQ(matched("NVIDIA H200", 140.4, 700, &why), "h200-sxm-141gb") << why;
  EXPECT_NE(why.find("power limit 700 W"), std::string::npos) << why;
}

TEST(CatalogueMatch, H200NvlByNameOrPowerLimit) {
  std::string why;
  EXPECT_EQ(matched("NVIDIA H200 NVL", 140.4, 600, &why), "h200-nvl-141gb") << why;
  EXPECT_EQ(why, "NVML name \"NVIDIA H200 NVL\"");
  EXPECT_EQ(matched("NVIDIA H200", 140.4, 600, &why), "h200-nvl-141gb") << why;
  EXPECT_NE(why.find("power limit 600 W"), std::string::npos) << why;
}

TEST(CatalogueMatch, H200WithoutPowerLimitIsAmbiguous) {
  std::string why;
  EXPECT_EQ(matched("NVIDIA H200", 140.4, 0, &why), "(none)");
  EXPECT_NE(why.find("ambiguous"), std::string::npos) << why;
}

TEST(CatalogueMatch, H100VariantsByName) {
  EXPECT_EQ(matched("NVIDIA H100 PCIe", 79.6, 350), "h100-pcie-80gb");
  EXPECT_EQ(matched("NVIDIA H100 80GB HBM3", 79.6, 700), "h100-sxm5-80gb");
  EXPECT_EQ(matched("NVIDIA H100 NVL", 93.6, 400), "h100-nvl-94gb");
}

TEST(CatalogueMatch, A100FortyVersusEightyByName) {
  EXPECT_EQ(matched("NVIDIA A100-PCIE-40GB", 40, 250), "a100-pcie-40gb");
  EXPECT_EQ(matched("NVIDIA A100 80GB PCIe", 80, 300), "a100-pcie-80gb");
  EXPECT_EQ(matched("NVIDIA A100-SXM4-40GB", 40, 400), "a100-sxm4-40gb");
  EXPECT_EQ(matched("NVIDIA A100-SXM4-80GB", 80, 400), "a100-sxm4-80gb");
  EXPECT_EQ(matched("NVIDIA L4", 22.5, 72), "l4-24gb");
  EXPECT_EQ(matched("NVIDIA L40S", 45, 350), "l40s-48gb");
}

TEST(CatalogueMatch, UnknownCardSaysWhy) {
  std::string why;
  EXPECT_EQ(catalogue::builtin().match("NVIDIA GeForce RTX 4090", 24, 450, &why), nullptr);
  EXPECT_NE(why.find("NVIDIA GeForce RTX 4090"), std::string::npos) << why;
  EXPECT_EQ(catalogue::builtin().match("", 0, 0), nullptr);  // `why` is optional
}

TEST(CatalogueMatch, SharedNameSeparatedByMemory) {
  json small = minimal_card("test-40gb");
  small["memory_gb"] = 40;
  json large = minimal_card("test-80gb");
  const auto cat = catalogue::from_json(document({small, large}));
  std::string why;
  const auto* card = cat.match("Test GPU", 79.6, 350, &why);
  ASSERT_NE(card, nullptr) << why;
  EXPECT_EQ(card->id, "test-80gb");
  EXPECT_NE(why.find("GiB"), std::string::npos) << why;
  EXPECT_EQ(cat.match("Test GPU", 20, 350, &why), nullptr);
}

TEST(CatalogueJson, AcceptsAMinimalCard) {
  const auto cat = catalogue::from_json(document({minimal_card("ok")}));
  ASSERT_EQ(cat.cards().size(), 1u);
  EXPECT_EQ(cat.cards()[0].dense_tflops.count("fp8_e4m3"), 0u);  // null: no tensor-core path
  EXPECT_DOUBLE_EQ(cat.cards()[0].dense_tflops.at("bf16"), 800);
}

TEST(CatalogueJson, MalformedInputNamesCardAndField) {
  json bad = minimal_card("broken-card");
  bad.erase("tdp_w");
  std::string e = error_of(document({minimal_card("fine"), bad}));
  EXPECT_NE(e.find("broken-card"), std::string::npos) << e;
  EXPECT_NE(e.find("tdp_w"), std::string::npos) << e;

  bad = minimal_card("negative");
  bad["bandwidth_gbs"] = -1;
  e = error_of(document({bad}));
  EXPECT_NE(e.find("bandwidth_gbs"), std::string::npos) << e;

  bad = minimal_card("text-number");
  bad["memory_gb"] = "80";
  e = error_of(document({bad}));
  EXPECT_NE(e.find("memory_gb"), std::string::npos) << e;

  bad = minimal_card("no-fp8");
  bad["dense_tflops"].erase("fp8_e4m3");
  e = error_of(document({bad}));
  EXPECT_NE(e.find("dense_tflops.fp8_e4m3"), std::string::npos) << e;

  bad = minimal_card("no-names");
  bad["nvml_names"] = json::array();
  e = error_of(document({bad}));
  EXPECT_NE(e.find("nvml_names"), std::string::npos) << e;

  e = error_of(document({minimal_card("twice"), minimal_card("twice")}));
  EXPECT_NE(e.find("\"id\""), std::string::npos) << e;

  e = error_of(json{{"schema", "something/2"}, {"cards", {minimal_card("x")}}});
  EXPECT_NE(e.find("schema"), std::string::npos) << e;
  e = error_of(json{{"schema", "itera.catalogue/1"}});
  EXPECT_NE(e.find("cards"), std::string::npos) << e;
}

}  // namespace
