#!/usr/bin/env bash
# Session 29, call 4: stream_fairness.cu (built here: nvcc -O3 -std=c++17 -arch=sm_90a), static
# shares against chunks claimed at run time, the attention's bytes and 1 GiB.
set -uo pipefail
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
./sf > $OUT/stream_fairness.txt 2>&1; echo "rc $?"
./sf > $OUT/stream_fairness_2.txt 2>&1; echo "rc $?"
grep -v "per SM" $OUT/stream_fairness.txt; echo "== again"; grep -v "per SM" $OUT/stream_fairness_2.txt
