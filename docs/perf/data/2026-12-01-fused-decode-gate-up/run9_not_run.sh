#!/usr/bin/env bash
# Not run (the device time was spent): the next session's first call, on this session's final tree
# (2302e61 or later). Bundle build/itera and build/tests/itera_device_tests into bb.tgz (carry it).
# The review's mends ran nowhere yet: the fused-products test (new shapes and the column rule), the
# llm device tests, o_proj's trial with the fused gate/up after it (the batch-64 graph table and the
# bench), then the benches.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 240 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run1_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/run1_llm_tests.log | head
ITERA_LLM_TRIAL_LOG=1 ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run1_b64.log 2>&1
echo "b64 timing rc=$?"; grep -E "CUDA graph:|llm product trial, o_proj" $OUT/run1_b64.log | head -4
sed -n '/graph step by kernel/,/in order/p' $OUT/run1_b64.log | head -14
timeout 90 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/run1_prefill.jsonl > $OUT/run1_prefill.md 2>&1; echo "prefill rc=$?"
timeout 150 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/run1_decode.jsonl > $OUT/run1_decode.md 2>&1; echo "decode rc=$?"
grep -E "^\| batch=" $OUT/run1_decode.md; grep -E "% of prefill|ttft" $OUT/run1_prefill.md | head -3
