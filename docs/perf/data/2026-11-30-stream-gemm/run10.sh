#!/usr/bin/env bash
# run 10: argmax rows over fewer blocks when many rows fill the card (ITERA_X_ARGMAX_FILL: blocks per SM)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for fill in 1 2; do ITERA_X_ARGMAX_FILL=$fill timeout 100 $B/itera_device_tests --gtest_filter='*argmax*' > $OUT/argmax_tests_$fill.log 2>&1; echo "argmax tests fill=$fill rc=$? $(grep -E 'PASSED|FAILED' $OUT/argmax_tests_$fill.log | tail -1)"; done
f=$OUT/timing.log
for r in 1 2; do for b in 64 16; do for fill in "" 1 2; do
  echo "=== round $r batch $b fill ${fill:-none}" >> $f
  ITERA_X_ARGMAX_FILL=$fill ITERA_LLM_TIMING_BATCH=$b timeout 100 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  echo "r$r b$b fill=${fill:-none}: $(grep 'CUDA graph' $f | tail -1 | sed -E 's/.*context ~[0-9]+, //') argmax $(grep '^  argmax' $f | tail -1 | awk '{print $3}') us"
done; done; done
