// The report's text helpers (src/report/text_format.hpp).
#include <gtest/gtest.h>

#include "src/report/text_format.hpp"

namespace itera {
namespace {

// The short form of a build's commit in every report header: 12 characters of the hash, and the
// mark of a build from a modified tree kept (a result measured on uncommitted code must not read
// as the commit's own).
TEST(ShortCommit, KeepsTheModifiedTreeMark) {
  EXPECT_EQ(report::short_commit("7de408bc5e06a1b2c3d4"), "7de408bc5e06");
  EXPECT_EQ(report::short_commit("7de408bc5e06a1b2c3d4-dirty"), "7de408bc5e06-dirty");
  EXPECT_EQ(report::short_commit("7de408bc5e06-dirty"), "7de408bc5e06-dirty");
  EXPECT_EQ(report::short_commit("abc-dirty"), "abc-dirty");
  EXPECT_EQ(report::short_commit("abc"), "abc");
  EXPECT_EQ(report::short_commit("unknown"), "unknown");
  EXPECT_EQ(report::short_commit(""), "");
}

}  // namespace
}  // namespace itera
