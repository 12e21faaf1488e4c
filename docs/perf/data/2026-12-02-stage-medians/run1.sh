#!/usr/bin/env bash
# Session 25, call 1, on 0ebd48e + next_decode_product_not_run.diff applied: the causal-prefill test
# at 684 tokens (two-stage ring parity wrap), the decode product against fp64, the batch-64/16/8
# graph step with ITERA_LLM_DECODE_PRODUCT=0/1 alternating, the decode bench b64 both ways.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_cuda.long_causal_prefill_on_each_attention_kernel:llm_fused_products.decode_product_matches_fp64' > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "normalised error|max error|^\[  (PASSED|FAILED) |Failure" $OUT/tests.log | head -30
t() {  # switch batch
  local f=$OUT/t_p$1_b$2.log
  ITERA_LLM_DECODE_PRODUCT=$1 ITERA_LLM_TIMING_BATCH=$2 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  echo "product=$1 b$2 graph $g ms" | tee -a $OUT/ab.txt
}
for r in 1 2 3; do t 0 64; t 1 64; done
for r in 1 2; do for b in 16 8; do t 0 $b; t 1 $b; done; done
for p in 0 1; do echo "== product=$p b64 table"; sed -n '/graph step by kernel/,/in order/p' $OUT/t_p${p}_b64.log | head -14; done
for p in 0 1 0 1; do
  ITERA_LLM_DECODE_PRODUCT=$p timeout 100 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/b64_p$p.jsonl >> $OUT/b64_p$p.md 2>&1
  echo "bench b64 product=$p rc=$?: $(grep -E '^\| ok' $OUT/b64_p$p.md | tail -1 | cut -c1-200)"
done
cd $OUT && tar czf logs.tgz *.log *.md *.jsonl && rm -f *.log *.md *.jsonl
echo; sort -s -k2,2 -k1,1 $OUT/ab.txt
