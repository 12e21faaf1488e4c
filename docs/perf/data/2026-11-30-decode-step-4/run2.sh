#!/usr/bin/env bash
# session 10, run 2: ablations of the one-kernel step (ITERA_X_ABLATE bits: 1 no attention, 2 no grid barriers, 4 consumers drain only, 8 no norms/staging); timing test, bf16/fp8, 2 rounds; traces of 0, 3, 15 (fp8)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
t() { echo "=== ablate $1 $2" >>$L; ITERA_X_ABLATE=$1 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/dt_abl --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; cat $OUT/t.log >>$L
  grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*CUDA graph: \([0-9.]*\) ms.*/\1/'; }
for r in 1 2; do for w in fp8_e4m3 bf16; do
  line="$w"; for a in 0 1 2 4 8 3 9 11 12 15; do line="$line a$a $(t $a $w)"; done; echo "$line"
done; done
for a in 0 3 15; do
echo "=== trace ablate $a fp8" | tee -a $L
ITERA_X_ABLATE=$a ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/dt_abl --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | tee -a $L | head -16
sed -n '/block 0.s tiles/,/OK/p' $OUT/t.log >>$L
done
rm -f $OUT/t.log
