#!/usr/bin/env bash
# Session 2026-12-01 (sixteenth), run 9: the split residual products' algorithm chosen by a trial
# over every layer's weights (ITERA_LLM_SPLIT_TRIAL=1) against the heuristic's first, batch 64
# and 16, alternating, two rounds; the fusion tests with the trial on.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ITERA_LLM_SPLIT_TRIAL=1 timeout 40 $B/itera_device_tests --gtest_filter='*decode_fusions*' > $OUT/run9_tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/run9_tests.log
for b in 64 16; do for rep in 1 2; do for trial in 1 0; do
  ITERA_LLM_SPLIT_TRIAL=$trial ITERA_LLM_TIMING_BATCH=$b timeout 40 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== batch $b trial $trial"; cat /tmp/t.log; } >> $OUT/run9_stages.log
  echo "== batch $b trial $trial"; grep -E "CUDA graph|/o_proj|/down " /tmp/t.log | sed 's/llama-3.1-8b bf16 decode, bf16 compute, bf16 KV cache, //'
done; done; done
