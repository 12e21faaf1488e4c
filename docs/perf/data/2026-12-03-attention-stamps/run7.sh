#!/usr/bin/env bash
# Session 29, call 7 (the kept code, uncommitted on dcf3564): the wide decode attention's loader
# warps by rule (tensor_core_decode_loaders), against ITERA_LLM_WIDE_LOADERS=0 in the same binary.
# Attention tests (both ways), graph A/B at batch 2, 4, 8, 16, 32 (two rounds) and 64 (one: the rule
# leaves it alone), bf16.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
F='llm_cuda.wide_*:llm_cuda.tensor_core_*:llm_cuda.rope_in_*:llm_cuda.fp8_kv_cache_decode*:llm_cuda.fp16_decode*:llm_decode_attention.*:llm_cuda.tiny_fp8_kv*:llm_decode_fusions.*'
for l in 1 0; do
  ITERA_LLM_WIDE_LOADERS=$l timeout 200 bb/bin/dt_new --gtest_filter="$F" > $OUT/tests_l$l.log 2>&1
  echo "tests loaders=$l: rc $? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_l$l.log | tr '\n' ' ')"
done
: > $OUT/ab.txt
for b in 2 4 8 16 32 64; do
  r=2; [ $b = 64 ] && r=1
  bash scripts/device_decode_ab.sh bb.tgz "$OUT" --batch $b --weights bf16 --rounds $r \
    off=dt_new,ITERA_LLM_WIDE_LOADERS=0 on=dt_new 2>&1 | grep -E "^round|^sums" | sed "s/^/b$b /" | tee -a $OUT/ab.txt
  grep -E "^===|^  decode_attention_wide_kernel   " $OUT/all.log | paste - - | awk '{print "   b'$b'", $2, "attention us a step", $(NF)}' | tee -a $OUT/ab.txt
  mkdir -p /tmp/logs && cp $OUT/all.log /tmp/logs/all_b$b.log
done
tar czf $OUT/logs.tgz -C /tmp/logs . && rm -f $OUT/all.log
