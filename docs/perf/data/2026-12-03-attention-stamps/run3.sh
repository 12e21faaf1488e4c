#!/usr/bin/env bash
# Session 29, call 3 (dcf3564 + XEXP: the wide decode attention's thread 0 bulk-prefetches K and V
# tiles ITERA_X_PF tiles past the ring's front into the L2 (cp.async.bulk.prefetch.L2), and the
# stamp probe, ITERA_X_PROBE=1). Attention tests at PF=2; batch-64 graph A/B (bf16, three rounds);
# stamps of PF=2.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
D=docs/perf/data/2026-12-03-attention-stamps
F='llm_cuda.wide_*:llm_cuda.tensor_core_*:llm_cuda.rope_in_*:llm_cuda.fp8_kv_cache_decode*:llm_cuda.fp16_decode*:llm_decode_attention.*'
ITERA_X_PF=2 timeout 120 $B/itera_device_tests --gtest_filter="$F" > $OUT/tests_pf2.log 2>&1
echo "tests pf2: rc $? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_pf2.log | tr '\n' ' ')"
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --batch 64 --weights bf16 --rounds 3 \
  base=itera_device_tests pf1=itera_device_tests,ITERA_X_PF=1 pf2=itera_device_tests,ITERA_X_PF=2 \
  pf4=itera_device_tests,ITERA_X_PF=4 2>&1 | tee $OUT/ab.txt | tail -6
grep -E "^===|decode_attention_wide_kernel  " $OUT/all.log | head -24
for pf in 0 2; do
  ITERA_X_PROBE=1 ITERA_X_PF=$pf ITERA_LLM_TIMING_BATCH=64 timeout 100 $B/itera_device_tests \
    --gtest_filter='*decode_timing_llama*' > $OUT/stamps_pf$pf.log 2>&1
  echo "== stamps pf$pf"; python3 $D/stamps.py $OUT/stamps_pf$pf.log 2>&1 | sed -n '1,22p'
done
