#!/usr/bin/env bash
# Session 29, call 6 (dcf3564 + loader_warps.diff): the wide decode attention with two more warps a
# block that only issue the ring's copies (128 threads, ITERA_XEXP_LOADERS=2 at build time: dt_l2)
# against the same source at 0 (dt_base). Attention tests on dt_l2, batch-64 graph A/B (bf16, three
# rounds), batch 16 (clusters) two rounds.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
F='llm_cuda.wide_*:llm_cuda.tensor_core_*:llm_cuda.rope_in_*:llm_cuda.fp8_kv_cache_decode*:llm_cuda.fp16_decode*:llm_decode_attention.*'
timeout 120 bb/bin/dt_l2 --gtest_filter="$F" > $OUT/tests_l2.log 2>&1
echo "tests l2: rc $? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_l2.log | tr '\n' ' ')"
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --batch 64 --weights bf16 --rounds 3 base=dt_base l2=dt_l2 2>&1 | tee $OUT/ab64.txt | tail -5
cp $OUT/all.log $OUT/all64.log
grep -E "^===|decode_attention_wide_kernel  " $OUT/all64.log | head -6
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --batch 16 --weights bf16 --rounds 2 base=dt_base l2=dt_l2 2>&1 | tee $OUT/ab16.txt | tail -4
grep -E "^===|decode_attention_wide_kernel  " $OUT/all.log | head -4
