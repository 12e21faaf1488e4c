#!/usr/bin/env bash
# Session 29, call 5 (one machine for both): the wide attention's stamps at batch 64 (the probe of
# global_splits_tried.diff, ITERA_X_PROBE=1, no split) and stream_fairness.cu, to tell the
# hardware's shares from the attention's own structure.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
D=docs/perf/data/2026-12-03-attention-stamps
nvidia-smi --query-gpu=name,serial,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
ITERA_X_PROBE=1 ITERA_LLM_TIMING_BATCH=64 timeout 100 bb/bin/itera_device_tests \
  --gtest_filter='*decode_timing_llama*' > $OUT/stamps.log 2>&1; echo "rc $?"
grep -E "CUDA graph" $OUT/stamps.log | head -2
python3 $D/stamps.py $OUT/stamps.log 2>&1 | sed -n '1,22p'
./sf > $OUT/stream_fairness.txt 2>&1; echo "rc $?"; grep -v "per SM" $OUT/stream_fairness.txt | head -9
