#!/usr/bin/env bash
# Session 2026-12-01 (nineteenth), run 2: the MLP chain kernel (uncommitted working tree on d8998e0):
# its unit test against fp64, then the engine's batch-64/32/16 graph steps with ITERA_LLM_MLP_CHAIN=0
# (off) and 5 (on) alternating, then every device test with the chain on.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/itera_device_tests --gtest_filter='llm_mlp_chain.*' > $OUT/run2_unit.log 2>&1; unit=$?; echo "unit rc=$unit"
grep -E "Failure|error|Expected|Which is|actual|PASSED|FAILED|OK \]" $OUT/run2_unit.log | head -30
[ "$unit" = 0 ] || exit 1
for round in 1 2; do
  for batch in 64 32 16; do
    for chain in 0 5; do
      ITERA_LLM_MLP_CHAIN=$chain ITERA_LLM_TIMING_BATCH=$batch timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run2_stages_b${batch}_c${chain}_r${round}.log 2>&1
      echo "round $round batch $batch chain $chain rc=$? $(grep -o 'CUDA graph: [0-9.]* ms/step' $OUT/run2_stages_b${batch}_c${chain}_r${round}.log) $(grep -E 'mlp_block ' $OUT/run2_stages_b${batch}_c${chain}_r${round}.log | tr -s ' ')"
    done
  done
done
grep -A30 "by stage" $OUT/run2_stages_b64_c5_r2.log | head -25
ITERA_LLM_MLP_CHAIN=5 timeout 330 $B/itera_device_tests > $OUT/run2_all_tests_chain.log 2>&1; echo "all tests (chain on) rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED" $OUT/run2_all_tests_chain.log
