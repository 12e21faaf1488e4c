#!/usr/bin/env bash
# Session 27, call 6, the session's code (the gate/up normalising x itself from 33 rows, experiments
# removed): every llm device test; the batch-64 graph step with ITERA_LLM_GATE_UP_NORM 0/1
# alternating, two rounds; the decode bench at batch 1 and 64, bf16 and fp8 weights; the
# 2048-token prefill held 4 s.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 240 $B/itera_device_tests --gtest_filter='llm_*:-llm_products_timing.*:*_timing_*' > $OUT/llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/llm_tests.log | tail -6
t() {  # switch batch
  local f=$OUT/t_n$1_b$2.log
  ITERA_LLM_GATE_UP_NORM=$1 ITERA_LLM_TIMING_BATCH=$2 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(grep -A10 "graph step by kernel" $f | tail -9 | awk '$2 ~ /^[0-9]+$/ {printf "%s:%s=%s ", substr($1,1,20), $2, $3}')
  echo "norm=$1 b$2 graph $g ms  $n" >> $OUT/ab.txt
}
for r in 1 2; do t 0 64; t 1 64; done
timeout 220 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/decode.jsonl > $OUT/decode.md 2>&1
echo "decode bench rc=$?"
timeout 100 $B/itera bench llm --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/prefill.jsonl > $OUT/prefill.md 2>&1
echo "prefill bench rc=$?: $(grep -A1 '^| ok' $OUT/prefill.md | tail -1 | tr -s ' ' | cut -c1-200)"
cd $OUT && tar czf logs.tgz *.log *.md *.jsonl && cp decode.md decode_table.md && cp prefill.md prefill_table.md && rm -f *.log *.jsonl decode.md prefill.md
echo; sort -s -k2,2 -k1,1 $OUT/ab.txt | cut -c1-300
