#!/usr/bin/env bash
# Session 26, call 1: gate/up adding o_proj's parts and normalising first (k::add_norm_first):
# the kernel against add_rms_norm + gate_up_swiglu, the engine test in three modes, then the
# batch-64/16/8 graph step with ITERA_LLM_NORM_IN_GATE_UP=0/1 alternating, the b64 bench both
# ways, then the llm device tests.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_decode_fusions.*' > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "against|^\[  (PASSED|FAILED) |Failure|FAILED" $OUT/tests.log | head -40
t() {  # switch batch
  local f=$OUT/t_n$1_b$2.log
  ITERA_LLM_NORM_IN_GATE_UP=$1 ITERA_LLM_TIMING_BATCH=$2 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  echo "norm_in_gate_up=$1 b$2 graph $g ms" | tee -a $OUT/ab.txt
}
for r in 1 2 3; do t 0 64; t 1 64; done
for r in 1 2; do for b in 16 8; do t 0 $b; t 1 $b; done; done
for p in 0 1; do echo "== norm_in_gate_up=$p b64 table"; sed -n '/graph step by kernel/,/in order/p' $OUT/t_n${p}_b64.log | head -16; done
i=0
for p in 0 1 0 1; do
  i=$((i+1))
  ITERA_LLM_NORM_IN_GATE_UP=$p timeout 100 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/b64_n${p}_$i.jsonl >> $OUT/b64_n${p}_$i.md 2>&1
  echo "bench b64 norm_in_gate_up=$p rc=$?: $(grep -E '^\| ok' $OUT/b64_n${p}_$i.md | tail -1 | cut -c1-220)"
done
timeout 240 $B/itera_device_tests --gtest_filter='llm_*:-llm_products_timing.*:*_timing_*' > $OUT/llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/llm_tests.log | tail -8
cd $OUT && tar czf logs.tgz *.log *.md *.jsonl && rm -f *.log *.md *.jsonl
echo; sort -s -k2,2 -k1,1 $OUT/ab.txt
