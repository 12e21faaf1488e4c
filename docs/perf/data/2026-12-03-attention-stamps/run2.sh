#!/usr/bin/env bash
# Session 29, call 2 (dcf3564 + XEXP: the wide decode attention's rows split over k blocks without a
# cluster, ITERA_X_GSPLITS=k, partial states through global memory, the pair's last block merging;
# the stamp probe, ITERA_X_PROBE=1). Correctness on the attention tests at k = 2, 4, 8; batch-64
# graph A/B (bf16, three rounds); stamps of k = 4.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
D=docs/perf/data/2026-12-03-attention-stamps
F='llm_cuda.wide_*:llm_cuda.tensor_core_*:llm_cuda.rope_in_*:llm_cuda.fp8_kv_cache_decode*:llm_cuda.fp16_decode*:llm_decode_attention.*'
for k in 0 2 4 8; do
  ITERA_X_GSPLITS=$k timeout 120 $B/itera_device_tests --gtest_filter="$F" > $OUT/tests_g$k.log 2>&1
  echo "tests g$k: rc $? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_g$k.log | tr '\n' ' ')"
done
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --batch 64 --weights bf16 --rounds 3 \
  base=itera_device_tests g2=itera_device_tests,ITERA_X_GSPLITS=2 g4=itera_device_tests,ITERA_X_GSPLITS=4 \
  g8=itera_device_tests,ITERA_X_GSPLITS=8 2>&1 | tee $OUT/ab.txt | tail -14
ITERA_X_PROBE=1 ITERA_X_GSPLITS=4 ITERA_LLM_TIMING_BATCH=64 timeout 100 $B/itera_device_tests \
  --gtest_filter='*decode_timing_llama*' > $OUT/stamps_g4.log 2>&1
grep -E "decode_attention_wide|CUDA graph" $OUT/stamps_g4.log | head -4
python3 $D/stamps.py $OUT/stamps_g4.log | head -30
