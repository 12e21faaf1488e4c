#!/usr/bin/env bash
# Session 29, call 9 (a5efc1e + loaders_cap4_tried.diff): the loader-warp kernel capped at 128
# registers for four blocks an SM (__launch_bounds__(128, 4): 164-396 bytes of spills), forced at
# every size by ITERA_X_CAP4=1, against the kept code: attention tests, batch-64 graph (3 rounds).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
F='llm_cuda.wide_*:llm_cuda.tensor_core_*:llm_cuda.rope_in_*:llm_cuda.fp8_kv_cache_decode*:llm_decode_attention.*'
ITERA_X_CAP4=1 timeout 120 bb/bin/itera_device_tests --gtest_filter="$F" > $OUT/tests_cap4.log 2>&1
echo "tests cap4: rc $? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_cap4.log | tr '\n' ' ')"
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --batch 64 --weights bf16 --rounds 3 \
  kept=itera_device_tests cap4=itera_device_tests,ITERA_X_CAP4=1 2>&1 | tee $OUT/ab.txt | grep -E "^round|^sums"
grep -E "^===|^  decode_attention_wide_kernel   " $OUT/all.log | paste - - | awk '{print "   ", $2, "attention us a step", $(NF)}'
