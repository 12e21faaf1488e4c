#!/usr/bin/env bash
# fp8 tensor-core gemv (U=3, 3 blocks/SM): PDL on/off, fp8 and bf16 batch 1
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
N=$PWD/bb/bin/itera_device_tests
t() { timeout 120 $N --gtest_filter='*decode_timing_llama*' >$OUT/timing_$1.log 2>&1; echo "$1: $(grep -E 'CUDA graph' $OUT/timing_$1.log | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do
  ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_PDL=1 t fp8_pdl_$r; ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_PDL=0 t fp8_nopdl_$r
done
ITERA_LLM_PDL=1 t bf16_pdl; ITERA_LLM_PDL=0 t bf16_nopdl
