#!/usr/bin/env bash
# Run 5: the tiled chain's producer: one 32 KiB bulk copy a stage (as run 4), four of 8 KiB (ablate
# bit 8), without the L2 evict_first hint (16), both (24); the gate/up phase alone streaming (7) and
# the whole chain without fix-ups or products (6), alternating.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for round in 1 2; do
  for base in 7 6; do
    for extra in 0 8 16 24; do
      a=$((base + extra)); f=$OUT/run5_a${a}_r${round}.log
      ITERA_LLM_MLP_CHAIN_TILED=1 ITERA_X_CHAIN_ABLATE=$a ITERA_LLM_MLP_CHAIN=5 ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $f 2>&1
      echo "round $round ablate $a rc=$? $(grep -o 'CUDA graph: [0-9.]* ms/step' $f) $(grep -E 'gate_up_down' $f | tr -s ' ')"
    done
  done
done
