#!/usr/bin/env bash
# Session 22, call 4, on 53bbe71 (code of 615a925): every device test, the batch-64 graph table,
# the benches. At most 8 files under $OUT (more are not brought back).
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
gzip $OUT/device_tests.log $OUT/b64_timing.log
grep -E "^\| batch=" $OUT/decode.md
