#!/usr/bin/env bash
# Session 24, call 1, on 9bb50a3 + next_product_clusters_not_run.diff (uncommitted): the product
# clusters' tests (both switches), the llm device tests with clusters on, the prefill stage table
# A/B (ITERA_LLM_PRODUCT_CLUSTER=0/1 alternating), the 2048-token prefill bench both ways.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for c in 1 0; do
  ITERA_LLM_PRODUCT_CLUSTER=$c timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_products.*' > $OUT/fused_c$c.log 2>&1
  echo "fused products cluster=$c rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|error" $OUT/fused_c$c.log | head -8
done
timeout 240 $B/itera_device_tests --gtest_filter='llm_*:-llm_products_timing.*:*_timing_*' > $OUT/llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/llm_tests.log | head -8
for r in 1 2; do for c in 0 1; do
  ITERA_LLM_PRODUCT_CLUSTER=$c ITERA_LLM_PREFILL_TOKENS=2048 timeout 90 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/table_c${c}_r$r.log 2>&1
  echo "table cluster=$c round=$r rc=$?: $(grep -E 'ms per call' $OUT/table_c${c}_r$r.log | sed 's/.*: //;s/ (.*//')"
  grep -E "qkv|gate_up|sum of" $OUT/table_c${c}_r$r.log
done; done
for c in 1 0; do
  ITERA_LLM_PRODUCT_CLUSTER=$c timeout 90 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/prefill_c$c.jsonl > $OUT/prefill_c$c.md 2>&1; echo "prefill bench cluster=$c rc=$?"
  grep -E "^\| ok" $OUT/prefill_c$c.md | head -2
done
cd $OUT && tar czf logs.tgz *.log *.md *.jsonl && rm -f *.log *.md *.jsonl
