#!/usr/bin/env bash
# Session 26, call 2: x's rows stored with an L2 evict_last policy (ITERA_X_KEEP_X, temporary)
# by add_rms_norm and by the fused gate/up's first step, crossed with ITERA_LLM_NORM_IN_GATE_UP:
# the batch-64 and batch-8 graph step, alternating; the fused test again (tolerance mended).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_decode_fusions.gate_up_adds*' > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" $OUT/tests.log | head -10
ITERA_X_KEEP_X=1 timeout 120 $B/itera_device_tests --gtest_filter='llm_decode_fusions.*' > $OUT/tests_keep.log 2>&1
echo "tests keep rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" $OUT/tests_keep.log | head -10
t() {  # norm keep batch
  local f=$OUT/t_n$1_k$2_b$3.log
  ITERA_LLM_NORM_IN_GATE_UP=$1 ITERA_X_KEEP_X=$2 ITERA_LLM_TIMING_BATCH=$3 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(grep -E "^  rms_norm_kernel|^  fused_product_kernel" $f | tail -2 | awk '{print $1"="$3}' | tr '\n' ' ')
  echo "norm=$1 keep=$2 b$3 graph $g ms  $n" | tee -a $OUT/ab.txt
}
for r in 1 2; do t 0 0 64; t 0 1 64; t 1 0 64; t 1 1 64; done
for r in 1 2; do t 0 0 8; t 0 1 8; t 1 1 8; done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
echo; sort -s -k3,3 -k1,2 $OUT/ab.txt
