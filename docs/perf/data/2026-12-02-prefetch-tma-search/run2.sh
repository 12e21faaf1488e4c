#!/usr/bin/env bash
# Session 23, call 2, on 2434910: the norms' L2 prefetch of the next product's weight head. Batch-64
# graph step, alternating: f429eb4 (old), this build with ITERA_LLM_L2_AHEAD_KB=0 (the early parts
# alone) and at 4, 8, 16, 32 MB; batch 16 and 8 for old / 0 / 8 MB; then the tests it touches.
set -uo pipefail
mkdir -p old && tar xJf bo.txz -C old && tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
t() {  # label batch bindir kb
  local f=$OUT/t_$1_b$2.log
  ITERA_LLM_L2_AHEAD_KB=$4 ITERA_LLM_TIMING_BATCH=$2 LD_LIBRARY_PATH=$3/lib:/usr/local/cuda/lib64 timeout 60 \
    $3/bin/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(sed -n '/graph step by kernel/,/in order/p' $f | grep -E "rms_norm_kernel" | tail -1 | awk '{print $3}')
  local q=$(sed -n '/graph step by kernel/,/in order/p' $f | grep -E "tst_80x64" | tail -1 | awk '{print $3}')
  local u=$(sed -n '/graph step by kernel/,/in order/p' $f | grep -E "fused_product" | tail -1 | awk '{print $3}')
  echo "$1 b$2 graph $g ms norm $n qkv(tst) $q gate_up $u" | tee -a $OUT/ab.txt
}
for r in 1 2 3; do
  t old 64 $PWD/old/bb 0; t k0 64 $PWD/bb 0; t k4 64 $PWD/bb 4096; t k8 64 $PWD/bb 8192; t k16 64 $PWD/bb 16384; t k32 64 $PWD/bb 32768
done
for r in 1 2; do for b in 16 8; do t old $b $PWD/old/bb 0; t k0 $b $PWD/bb 0; t k8 $b $PWD/bb 8192; done; done
timeout 120 bb/bin/itera_device_tests --gtest_filter='llm_decode_fusions.*:llm_cuda.rope_in_decode_attention*' > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/tests.log | head
gzip $OUT/t_*.log; tar cf $OUT/timing_logs.tar -C $OUT $(cd $OUT && ls t_*.log.gz) && rm $OUT/t_*.log.gz
echo; sort -k1,2 -s $OUT/ab.txt | awk '{print}' | column -t
