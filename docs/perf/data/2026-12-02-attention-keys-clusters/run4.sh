#!/usr/bin/env bash
# Session 24, call 4, on 9bb50a3 + the prefill table's whole-pass row (uncommitted): how much of a
# 2048-token prefill is gaps between kernels (the bench's TTFT is the pass's span, first kernel to
# last); three rounds.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for r in 1 2 3; do
  ITERA_LLM_PREFILL_TOKENS=2048 timeout 90 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/table_r$r.log 2>&1
  echo "round $r rc=$?"; grep -E "ms per call|sum of|whole pass" $OUT/table_r$r.log
done
ITERA_LLM_PREFILL_TOKENS=512 timeout 90 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/table_512.log 2>&1
echo "512 tokens rc=$?"; grep -E "ms per call|sum of|whole pass" $OUT/table_512.log
cat $OUT/table_r3.log | sed -n '/prefill by stage/,/whole pass/p'
