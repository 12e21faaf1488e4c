#!/usr/bin/env bash
# Session 27, call 8: the rule's untested rows: the graph step at batch 40 and 48 (and 33),
# ITERA_LLM_GATE_UP_NORM 0/1 alternating, two rounds (the kept code, call 7's binary).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
t() {  # switch batch
  local f=$OUT/t_n$1_b$2.log
  ITERA_LLM_GATE_UP_NORM=$1 ITERA_LLM_TIMING_BATCH=$2 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(grep -A10 "graph step by kernel" $f | tail -9 | awk '$2 ~ /^[0-9]+$/ {printf "%s:%s=%s ", substr($1,1,20), $2, $3}')
  echo "norm=$1 b$2 graph $g ms  $n" >> $OUT/ab.txt
}
for r in 1 2; do for b in 33 40 48; do t 0 $b; t 1 $b; done; done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
sort -s -k2,2 -k1,1 $OUT/ab.txt | cut -c1-250
