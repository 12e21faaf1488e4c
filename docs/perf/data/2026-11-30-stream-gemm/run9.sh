#!/usr/bin/env bash
# run 9: where the 2048-token prefill and the batch-64 decode step go on c177dd2's code (stage tables)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
ITERA_LLM_PREFILL_TOKENS=2048 timeout 200 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/prefill.log 2>&1; echo "prefill rc=$?"
ITERA_LLM_TIMING_BATCH=64 timeout 200 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/decode_b64.log 2>&1; echo "decode rc=$?"
grep -vE "^\[|^Running|^Note" $OUT/prefill.log | head -60
grep -E "CUDA graph|eager" $OUT/decode_b64.log; sed -n '/decode step by stage/,$p' $OUT/decode_b64.log | head -40
