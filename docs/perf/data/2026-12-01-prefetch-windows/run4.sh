#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 4: run 3's failure (llm_fused_gemv.engine_batch_1_decode,
# bf16 compute with fp8 weights, errors 0.47-0.67, after the llama-shape timing test) without the
# prefetch: the test alone, after the timing test, run 3's filter; each twice.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
t() {  # label filter [env...]
  local label=$1 filter=$2; shift 2
  env "$@" timeout 150 $B/itera_device_tests --gtest_filter="$filter" > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run4_tests.log
  echo "$label: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' /tmp/t.log | tr '\n' ' ') $(grep -c 'weights, batch 1 decode step.*error 0\.[1-9]' /tmp/t.log) bad steps"
}
for i in 1 2; do
  t "alone $i" 'llm_fused_gemv.engine_batch_1*'
  t "after timing $i" 'llm_cuda.decode_timing_llama*:llm_fused_gemv.engine_batch_1*'
  t "run 3 filter $i" 'llm*decode*:llm*graph*'
done
t "after timing, step kernel off" 'llm_cuda.decode_timing_llama*:llm_fused_gemv.engine_batch_1*' ITERA_LLM_DECODE_STEP=0
t "after timing, trials off" 'llm_cuda.decode_timing_llama*:llm_fused_gemv.engine_batch_1*' ITERA_LLM_PRODUCT_TRIAL=0 ITERA_LLM_SPLIT_TRIAL=0
t "after timing fp8" 'llm_cuda.decode_timing_llama*:llm_fused_gemv.engine_batch_1*' ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3
