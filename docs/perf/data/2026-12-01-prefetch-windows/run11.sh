#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 11: the fix (the engine's uploads and fills on its own
# stream, cuda_backend::upload / fill) and its test (first_prefill_over_used_memory: eight engines
# over device memory filled with NaN). The test against the code before the fix (itera_device_tests_old:
# the same tests, the engine's cudaMemcpy / cudaMemset as they were), then on the fix, run 4's
# failing order, and every device test.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
T='llm_fused_gemv.first_prefill*'
for who in itera_device_tests_old itera_device_tests_old itera_device_tests itera_device_tests; do
  timeout 60 $B/$who --gtest_filter="$T" > /tmp/t.log 2>&1
  cat /tmp/t.log >> $OUT/run11_first_prefill_$who.log
  echo "$who: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' /tmp/t.log | tr '\n' ' ') failures: $(grep -c 'Failure' /tmp/t.log)"
done
timeout 60 $B/itera_device_tests --gtest_filter='llm_cuda.decode_timing_llama*:llm_fused_gemv.*' > $OUT/run11_run4_order.log 2>&1
echo "run 4's order: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/run11_run4_order.log | tr '\n' ' ')"
timeout 260 $B/itera_device_tests > $OUT/run11_all_tests.log 2>&1; echo "all device tests rc=$?"
grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED|tests from.*ran" $OUT/run11_all_tests.log
