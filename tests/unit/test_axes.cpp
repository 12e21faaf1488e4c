#include <gtest/gtest.h>

#include "itera/core/errors.hpp"
#include "itera/core/workload.hpp"

namespace itera {
namespace {

axis_decl int_axis(std::string name = "M") { return {name, axis_kind::integer, "1", "", {}, 1, 1 << 30}; }
axis_decl str_axis() { return {"format", axis_kind::string, "bf16", "", {"fp32", "bf16", "fp8_e4m3"}, 0, 0}; }

std::vector<std::string> v(std::initializer_list<const char*> l) { return {l.begin(), l.end()}; }

TEST(Axes, ListsAndRangesAsLlamaBench) {
  EXPECT_EQ(parse_axis_values(int_axis(), "1024,2048"), v({"1024", "2048"}));
  EXPECT_EQ(parse_axis_values(int_axis(), "1-4"), v({"1", "2", "3", "4"}));
  EXPECT_EQ(parse_axis_values(int_axis(), "1-9+4"), v({"1", "5", "9"}));
  EXPECT_EQ(parse_axis_values(int_axis(), "256-4096*2"), v({"256", "512", "1024", "2048", "4096"}));
  EXPECT_EQ(parse_axis_values(int_axis(), "100-1000*3"), v({"100", "300", "900"}));
  EXPECT_EQ(parse_axis_values(int_axis(), "1,8-10,64"), v({"1", "8", "9", "10", "64"}));
}

TEST(Axes, SizeSuffixes) {
  EXPECT_EQ(parse_axis_values(int_axis(), "1Ki,1Mi,1k,2M"), v({"1024", "1048576", "1000", "2000000"}));
  EXPECT_EQ(parse_axis_values(int_axis(), "1Mi-4Mi*2"), v({"1048576", "2097152", "4194304"}));
}

TEST(Axes, StringChoices) {
  EXPECT_EQ(parse_axis_values(str_axis(), "fp32,fp8_e4m3"), v({"fp32", "fp8_e4m3"}));
  try {
    parse_axis_values(str_axis(), "fp64");
    FAIL() << "fp64 accepted";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown value 'fp64'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("fp8_e4m3"), std::string::npos) << "the message lists the choices";
  }
}

TEST(Axes, MalformedValuesNameTheAxis) {
  for (const char* bad : {"", "abc", "1,,2", "12x", "4-1", "1-8*1", "1-8+0", "1-8*x", "0", "-5", "99999999999999999999"}) {
    try {
      parse_axis_values(int_axis("K"), bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("axis K"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_axis_values(int_axis(), "1-100000"), usage_error) << "too many values";
}

workload_decl toy() {
  workload_decl w;
  w.name = "toy";
  w.axes = {{"a", axis_kind::integer, "1,2", "", {}, 1, 100}, {"b", axis_kind::string, "x", "", {"x", "y"}, 0, 0}};
  return w;
}

TEST(Axes, ExpandIsTheProductFirstAxisOutermost) {
  const auto cases = expand_cases(toy(), {{"b", "x,y"}});
  ASSERT_EQ(cases.size(), 4u);
  EXPECT_EQ(cases[0], (axis_values{{"a", "1"}, {"b", "x"}}));
  EXPECT_EQ(cases[1], (axis_values{{"a", "1"}, {"b", "y"}}));
  EXPECT_EQ(cases[3], (axis_values{{"a", "2"}, {"b", "y"}}));
}

TEST(Axes, UnknownAxisListsTheWorkloadsAxes) {
  try {
    expand_cases(toy(), {{"c", "1"}});
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("has no axis 'c'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("a, b"), std::string::npos);
  }
}

TEST(Axes, RejectedCombinationsAreLeftOutAndExplainedWhenNothingRemains) {
  auto w = toy();
  w.reject = [](const axis_values& c) { return c[0].second == "2" && c[1].second == "y" ? "2 and y do not mix" : ""; };
  EXPECT_EQ(expand_cases(w, {{"b", "x,y"}}).size(), 3u);
  try {
    expand_cases(w, {{"a", "2"}, {"b", "y"}});
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("2 and y do not mix"), std::string::npos);
  }
}

TEST(Axes, BuiltinWorkloadsExpandTheirDefaults) {
  for (const auto& w : builtin_workloads().all()) {
    EXPECT_FALSE(expand_cases(w, {}).empty()) << w.name;
    EXPECT_TRUE(w.backends.contains("cpu")) << w.name << " has no cpu reference";
  }
  // transfer leaves out d2d from host memory and h2d from device memory.
  const auto cases = expand_cases(builtin_workloads().get("transfer"), {{"bytes", "1Mi"}});
  EXPECT_EQ(cases.size(), 5u);
  EXPECT_THROW(builtin_workloads().get("nope"), usage_error);
}

}  // namespace
}  // namespace itera
