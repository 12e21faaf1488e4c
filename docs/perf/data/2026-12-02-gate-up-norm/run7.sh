#!/usr/bin/env bash
# Session 27, call 7: the final code (the normalising gate/up in decodes only: call 6's failing
# image-rows test had a 60-row prefill take it): every llm device test; the batch-64 decode bench
# with ITERA_LLM_GATE_UP_NORM=0 and 1 (bf16).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 240 $B/itera_device_tests --gtest_filter='llm_*:-llm_products_timing.*:*_timing_*' > $OUT/llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|image rows" $OUT/llm_tests.log | tail -6
for m in 0 1; do
  ITERA_LLM_GATE_UP_NORM=$m timeout 100 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/b64_n$m.jsonl > $OUT/b64_n$m.md 2>&1
  echo "bench norm=$m rc=$?"
done
cd $OUT && tar czf logs.tgz *.log *.md *.jsonl && rm -f *.log *.md *.jsonl
