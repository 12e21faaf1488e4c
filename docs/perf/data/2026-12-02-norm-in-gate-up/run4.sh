#!/usr/bin/env bash
# Session 26, call 4: the fused gate/up's first step again, the early x boxes now asked for by the
# consumers' leader past the grid barrier (no proxy fence in the producer's thread, which has a
# ring of w copies in flight): the kernel and engine tests, then the graph step with
# ITERA_LLM_NORM_IN_GATE_UP=0/1 alternating (x kept in the L2 both ways), b64, b16, b8.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
export ITERA_X_KEEP_X=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_decode_fusions.*' > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "act against|^\[  (PASSED|FAILED) |Failure" $OUT/tests.log | head -12
t() {  # norm batch
  local f=$OUT/t_n$1_b$2.log
  ITERA_LLM_NORM_IN_GATE_UP=$1 ITERA_LLM_TIMING_BATCH=$2 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(grep -A9 "graph step by kernel" $f | tail -9 | awk '$2 ~ /^[0-9]+$/ {printf "%s:%s=%s ", substr($1,1,24), $2, $3}')
  echo "norm=$1 b$2 graph $g ms  $n" | tee -a $OUT/ab.txt
}
for r in 1 2 3; do t 0 64; t 1 64; done
for r in 1 2; do for b in 16 8; do t 0 $b; t 1 $b; done; done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
echo; sort -s -k2,2 -k1,1 $OUT/ab.txt | cut -c1-330
