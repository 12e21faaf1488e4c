#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 10: run 9's failing prefill (logits error 1) stage by stage:
# each stage's output norm, non-finite and zero counts (ITERA_LLM_DEBUG_DUMP, a debug hook), under
# the poison, five times; the passing runs beside the failing ones.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for i in 1 2 3 4 5; do
  ITERA_LLM_DEBUG_DUMP=1 ITERA_TEST_POISON=1 timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_gemv.engine_batch_1*' > $OUT/run10_dump_$i.log 2>&1
  echo "run $i: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' $OUT/run10_dump_$i.log | tr '\n' ' ') prefill: $(grep 'DEBUG prefill' $OUT/run10_dump_$i.log | awk '{print $5}' | tr '\n' ' ')"
done
