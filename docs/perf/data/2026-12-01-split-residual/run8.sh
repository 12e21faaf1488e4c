#!/usr/bin/env bash
# Session 2026-12-01 (sixteenth), run 8: the review's mend (the norm kernel's null parts pointer,
# the products search tests' shared operands). The fusion tests, the decode kernels' tests, both
# products searches; the stage tables at batch 64 and 8 on the final code.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
ITERA_LLM_PRODUCTS_SEARCH=1 timeout 150 $B/itera_device_tests --gtest_filter='*decode_fusions*:*decode_kernels*:*products_timing*' > $OUT/run8_tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/run8_tests.log; grep -E "^\[  FAILED|parts as a batch|engine's form" $OUT/run8_tests.log | head -30
for b in 64 8; do
  ITERA_LLM_TIMING_BATCH=$b timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== batch $b"; cat /tmp/t.log; } >> $OUT/run8_stages.log
  grep -E "CUDA graph|/attention |/residual_norm|/down " /tmp/t.log
done
