#!/usr/bin/env bash
# Run 11: the MLP chain, version 2 (whole groups: 112 act columns a block, the down product in k
# slices stored once as the residual's parts; weights as stage images; no fix-ups): its unit test,
# then batch 64 graph steps off/on alternating (three rounds), batch 32 and 16 once, then the llm
# device tests with the chain on.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/itera_device_tests --gtest_filter='llm_mlp_chain.*' > $OUT/run11_unit.log 2>&1; unit=$?; echo "unit rc=$unit"
grep -E "Failure|Expected|Which is|differs|written|PASSED|FAILED|OK \]" $OUT/run11_unit.log | head -20
[ "$unit" = 0 ] || exit 1
for round in 1 2 3; do
  for chain in 0 5; do
    f=$OUT/run11_b64_c${chain}_r$round.log
    ITERA_LLM_MLP_CHAIN=$chain ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $f 2>&1
    echo "round $round batch 64 chain $chain rc=$? $(grep -o 'CUDA graph: [0-9.]* ms/step' $f) | $(grep -E 'mlp_block' $f | awk '{printf "%s %s, ", $1, $3}')"
  done
done
for batch in 32 16; do
  for chain in 0 5; do
    f=$OUT/run11_b${batch}_c${chain}.log
    ITERA_LLM_MLP_CHAIN=$chain ITERA_LLM_TIMING_BATCH=$batch timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $f 2>&1
    echo "batch $batch chain $chain rc=$? $(grep -o 'CUDA graph: [0-9.]* ms/step' $f) | $(grep -E 'mlp_block' $f | awk '{printf "%s %s, ", $1, $3}')"
  done
done
ITERA_LLM_MLP_CHAIN=5 timeout 200 $B/itera_device_tests --gtest_filter='llm*' > $OUT/run11_llm_tests_chain.log 2>&1; echo "llm tests (chain on) rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED" $OUT/run11_llm_tests_chain.log | head
