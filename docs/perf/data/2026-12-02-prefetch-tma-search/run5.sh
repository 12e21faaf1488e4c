#!/usr/bin/env bash
# Session 23, call 5, on 7eae049: the session's final code (f429eb4's kernels, the test fixes, the
# NaN-past-the-keys test): the batch-64 graph table, every device test, the benches, then
# the llm and ViT device tests with PDL on (kernels_with_pdl). At most 8 files under $OUT.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
ITERA_LLM_TIMING_BATCH=64 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/b64_timing.log 2>&1
grep -E "CUDA graph:" $OUT/b64_timing.log; sed -n '/graph step by kernel/,/in order/p' $OUT/b64_timing.log | head -12
timeout 300 $B/itera_device_tests > $OUT/device_tests.log 2>&1
echo "device tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/device_tests.log | head
timeout 90 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/prefill.jsonl > $OUT/prefill.md 2>&1; echo "prefill rc=$?"
timeout 150 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/decode.jsonl > $OUT/decode.md 2>&1; echo "decode rc=$?"
ITERA_LLM_PDL=1 timeout 200 $B/itera_device_tests --gtest_filter='llm_*:vit_*:-llm_products_timing.*:*_timing_*' > $OUT/pdl1_tests.log 2>&1
echo "pdl1 tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/pdl1_tests.log | head -5
gzip $OUT/*.log
grep -E "^\| ok" $OUT/prefill.md | head -2; grep -E "^\| batch=|^\| ok" $OUT/decode.md | head -8
