#!/usr/bin/env bash
# Not run (the device time was spent): the next session's first call, on this session's final tree.
# Bundle build/itera and build/tests/itera_device_tests into bb.tgz (carry it). The benches
# with the graph-timed product trial and the embedding's counters, then the LLM device tests and
# the batch-64 graph kernel table (the review's mends to the table, compiled, not yet run).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 240 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/run21_prefill.jsonl > $OUT/run21_prefill.md 2>&1; echo "prefill rc=$?"
timeout 300 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/run21_decode.jsonl > $OUT/run21_decode.md 2>&1; echo "decode rc=$?"
timeout 300 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run21_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/run21_llm_tests.log | head
ITERA_LLM_TIMING_BATCH=64 timeout 150 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run21_b64.log 2>&1
sed -n '/graph step by kernel/,/decode step by stage/p' $OUT/run21_b64.log | head -30
grep -E "tokens/s|TFLOP/s|tpot|ttft" $OUT/run21_prefill.md $OUT/run21_decode.md | head -30
