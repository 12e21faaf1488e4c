#!/usr/bin/env bash
# session 10, run 6: consumers that copy their share of a slot into registers and release it before multiplying (ablate 256), with conflict-free fake fp8 loads (384), against 0 and drain (4); step test with 256
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
ITERA_X_ABLATE=256 timeout 100 $B/dt_abl --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "a256 step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
t() { echo "=== ablate $1 $2" >>$L; ITERA_X_ABLATE=$1 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/dt_abl --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; cat $OUT/t.log >>$L
  grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*CUDA graph: \([0-9.]*\) ms.*/\1/'; }
for r in 1 2 3; do
  line="fp8"; for a in 0 256 384 4; do line="$line a$a $(t $a fp8_e4m3)"; done; echo "$line"
  line="bf16"; for a in 0 256 4; do line="$line a$a $(t $a bf16)"; done; echo "$line"
done
for a in 256; do
echo "=== trace ablate $a fp8" | tee -a $L
ITERA_X_ABLATE=$a ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/dt_abl --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | tee -a $L | head -16
grep "cycles a ns" $OUT/t.log | head -1
sed -n '/block 0.s tiles/,/OK/p' $OUT/t.log >>$L
done
rm -f $OUT/t.log
