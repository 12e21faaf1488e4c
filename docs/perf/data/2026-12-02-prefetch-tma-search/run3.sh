#!/usr/bin/env bash
# Session 23, call 3, on 9b0c0bd: the wide decode attention's tiles by the TMA. The NaN-past-the-
# keys test first; the batch-64/16/8 graph step alternating f429eb4 (old), this build (tma) and
# this build with ITERA_LLM_DECODE_TMA=0 (cp); then every llm device test but the timing ones.
set -uo pipefail
mkdir -p old && tar xJf bo.txz -C old && tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 60 bb/bin/itera_device_tests --gtest_filter='llm_decode_attention.*' > $OUT/nan_test.log 2>&1
echo "nan test rc=$?"; grep -E "normalised error|^\[  (PASSED|FAILED) |Failure" $OUT/nan_test.log | head
t() {  # label batch bindir tma
  local f=$OUT/t_$1_b$2.log
  ITERA_LLM_DECODE_TMA=$4 ITERA_LLM_TIMING_BATCH=$2 LD_LIBRARY_PATH=$3/lib:/usr/local/cuda/lib64 timeout 60 \
    $3/bin/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local a=$(sed -n '/graph step by kernel/,/in order/p' $f | grep -E "decode_attention" | tail -1 | awk '{print $3}')
  echo "$1 b$2 graph $g ms attention $a us" | tee -a $OUT/ab.txt
}
for r in 1 2 3; do t old 64 $PWD/old/bb 1; t tma 64 $PWD/bb 1; t cp 64 $PWD/bb 0; done
for r in 1 2; do for b in 16 8; do t old $b $PWD/old/bb 1; t tma $b $PWD/bb 1; t cp $b $PWD/bb 0; done; done
timeout 280 bb/bin/itera_device_tests --gtest_filter='llm_*:-llm_products_timing.*:*_timing_*' > $OUT/llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/llm_tests.log | head
gzip $OUT/t_*.log $OUT/llm_tests.log; tar cf $OUT/timing_logs.tar -C $OUT $(cd $OUT && ls t_*.log.gz) && rm $OUT/t_*.log.gz
echo; sort -s -k2,2 -k1,1 $OUT/ab.txt
