#!/usr/bin/env bash
# session 9, run 10: the K/V copy issued once the consumers have released a tile of the layer (dt_d) against the argmax commit with the copy at the layer's first tile (dt_c, ITERA_X_KVAT unset)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
timeout 150 $B/dt_d --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "dt_d step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
grep -E "Failure|Expected|Which is" $OUT/t.log | head -10
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2; do
  for w in fp8_e4m3 bf16; do t dt_c $w c$r X=1; t dt_d $w d$r X=1; done
done
rm -f $OUT/t.log
