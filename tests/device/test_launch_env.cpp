// The kernels' environment counts (src/kernels/launch.cuh: env_count), which the llm engine's A/B
// row thresholds read (ITERA_LLM_GEMV_MAX_FP8, ITERA_LLM_FUSED_GATE_UP, ITERA_LLM_FUSED_QKV): a
// value that is not all digits is refused with the variable and its value, not read as its
// leading number. No GPU needed; cuda builds only (the function lives in the cuda library).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#if ITERA_WITH_CUDA
#include "itera/core/errors.hpp"
#include "src/kernels/launch.cuh"
#endif

namespace {

#if !ITERA_WITH_CUDA

TEST(launch_env, env_count) { GTEST_SKIP() << "built without the cuda backend"; }

#else

constexpr const char* var = "ITERA_TEST_ENV_COUNT";

std::string refusal(const char* value) {
  setenv(var, value, 1);
  try {
    (void)itera::kernels::env_count(var, 5, "a whole number of rows");
  } catch (const itera::usage_error& e) {
    unsetenv(var);
    return e.what();
  }
  unsetenv(var);
  return "(no usage_error)";
}

TEST(launch_env, env_count) {
  unsetenv(var);
  EXPECT_EQ(itera::kernels::env_count(var, 5, "rows"), 5) << "unset: the default";
  setenv(var, "", 1);
  EXPECT_EQ(itera::kernels::env_count(var, 5, "rows"), 5) << "empty: the default";
  setenv(var, "0", 1);
  EXPECT_EQ(itera::kernels::env_count(var, 5, "rows"), 0);
  setenv(var, "12", 1);
  EXPECT_EQ(itera::kernels::env_count(var, 5, "rows"), 12);
  unsetenv(var);
  EXPECT_EQ(refusal("12abc"), "ITERA_TEST_ENV_COUNT='12abc': a whole number of rows");
  EXPECT_EQ(refusal("-1"), "ITERA_TEST_ENV_COUNT='-1': a whole number of rows");
  EXPECT_EQ(refusal(" 3"), "ITERA_TEST_ENV_COUNT=' 3': a whole number of rows");
  EXPECT_EQ(refusal("99999999999999999999"), "ITERA_TEST_ENV_COUNT='99999999999999999999': a whole number of rows");
}

#endif

}  // namespace
