// The markdown report's operating points: the highest rate whose run met its latency targets and
// the smallest batch limit at that rate, per group of the other axes.
#include <gtest/gtest.h>

#include <sstream>

#include "itera/report/writers.hpp"

namespace {

using namespace itera;

case_record server_case(const char* rate, const char* batch, bool meets, double goodput) {
  case_record r;
  r.workload = "llm";
  r.workload_version = 1;
  r.backend = "cpu";
  r.axes = {{"scenario", "server"}, {"batch", batch}, {"rate", rate}};
  r.host_ns = r.device_ns = {1e6, 2e6, 3e6};
  r.device_stats = summarize(r.device_ns);
  r.host_stats = summarize(r.host_ns);
  r.metrics = {{"load/meets_targets", meets ? 1.0 : 0.0, "bool"}, {"load/goodput", goodput, "requests/s"}};
  return r;
}

TEST(OperatingPoints, HighestMeetingRateThenSmallestBatch) {
  result_set set;
  set.source = "sweep";
  set.context.backend = "cpu";
  set.cases = {server_case("4", "64", true, 3.9), server_case("16", "64", true, 15.0),
               server_case("16", "32", true, 14.8), server_case("32", "64", false, 9.0)};
  std::ostringstream out;
  write_results(out, output_format::md, {set});
  const std::string md = out.str();
  ASSERT_NE(md.find("Operating points"), std::string::npos) << md;
  const auto row = md.substr(md.find("scenario=server |"));
  EXPECT_NE(row.find("16/s"), std::string::npos) << row;
  EXPECT_NE(row.find(" 32 |"), std::string::npos) << "the smaller batch meeting the targets at 16/s: " << row;
  EXPECT_NE(row.find("14.8"), std::string::npos) << row;
}

TEST(OperatingPoints, NoneMeetingSaysSo) {
  result_set set;
  set.source = "sweep";
  set.cases = {server_case("8", "4", false, 1.0)};
  std::ostringstream out;
  write_results(out, output_format::md, {set});
  EXPECT_NE(out.str().find("none meets them"), std::string::npos) << out.str();
}

}  // namespace
