#!/usr/bin/env bash
# Session 26, call 8: the decode gate/up's w boxes with the L2's evict_first policy
# (ITERA_X_W_FIRST, temporary) against not: the fused-product test, then the batch-64 and batch-16
# graph step alternating (batch 16 left out: device time).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ITERA_X_W_FIRST=1 timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_products.gate_up*' > $OUT/tests.log 2>&1
echo "test rc=$?"; grep -E "^\[  (PASSED|FAILED) " $OUT/tests.log
t() {  # first batch
  local f=$OUT/t_w$1_b$2.log
  ITERA_X_W_FIRST=$1 ITERA_LLM_TIMING_BATCH=$2 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(grep -A9 "graph step by kernel" $f | tail -9 | awk '$2 ~ /^[0-9]+$/ {printf "%s:%s=%s ", substr($1,1,24), $2, $3}')
  echo "w_first=$1 b$2 graph $g ms  $n" | tee -a $OUT/ab.txt
}
for r in 1 2 3; do t 0 64; t 1 64; done

cd $OUT && tar czf logs.tgz *.log && rm -f *.log
