#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 6: run 5's uninitialised reads counted by kernel; the
# order-dependent failure (after the llama-shape timing test) three times each with the fp8
# cuBLASLt products off, the trials off, and as built.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 300 $CS --tool initcheck --print-limit 20000 $B/itera_device_tests --gtest_filter='llm_fused_gemv.engine_batch_1*' > /tmp/ic.log 2>&1
echo "initcheck rc=$?"; grep -E "ERROR SUMMARY" /tmp/ic.log
grep -E "^=========     at " /tmp/ic.log | sed 's/(T1.*//; s/+0x.*//' | sort | uniq -c | sort -rn > $OUT/run6_initcheck_kernels.txt; cat $OUT/run6_initcheck_kernels.txt | head -20
grep -E "^=========     at |Address" /tmp/ic.log | paste - - | awk '{print $NF, $0}' | sed 's/(T1.*//' | awk '{print $1, $4, $5}' | sort -u | head -400 > $OUT/run6_initcheck_addresses.txt
grep -E "Uninitialized" /tmp/ic.log | sort | uniq -c
t() {  # label filter [env...]
  local label=$1 filter=$2; shift 2
  env "$@" timeout 150 $B/itera_device_tests --gtest_filter="$filter" > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run6_tests.log
  echo "$label: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' /tmp/t.log | tr '\n' ' ') $(grep -c 'weights, batch 1 decode step.*error 0\.[1-9]' /tmp/t.log) bad steps"
}
F='llm_cuda.decode_timing_llama*:llm_fused_gemv.engine_batch_1*'
for i in 1 2 3; do
  t "as built $i" "$F"
  t "fp8 products off $i" "$F" ITERA_LLM_FP8_PRODUCTS=0
  t "trials off $i" "$F" ITERA_LLM_PRODUCT_TRIAL=0 ITERA_LLM_SPLIT_TRIAL=0
done
