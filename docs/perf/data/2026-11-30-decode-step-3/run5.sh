#!/usr/bin/env bash
# session 9, run 5: fp8 weights: the fp16 conversion for the tensor cores folded into the norms and staging loops (dt_y) against run 4's binary (dt_x, switches off); the argmax and embed kernels' own durations (ncu)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
timeout 120 $B/dt_y --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; echo "dt_y step test rc $? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
grep -E "Failure|Expected|Which is" $OUT/t.log | head -14
t() { echo "=== $3 $1 $4 $2" >>$L; env $4 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$3 $1 $4 $2: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in 1 2 3; do
  t dt_x fp8_e4m3 x$r X=1
  t dt_y fp8_e4m3 y$r X=1
done
t dt_x bf16 x1 X=1
t dt_y bf16 y1 X=1
t dt_y fp8_e4m3 try ITERA_LLM_DECODE_STEP_TRACE=1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | head -24
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
if [ -n "$NCU" ]; then
  ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 200 $NCU --clock-control none --kernel-name regex:'argmax_kernel|embed_kernel|lm_head' --launch-skip 20 --launch-count 6 --metrics gpu__time_duration.sum,dram__bytes_read.sum $B/dt_y --gtest_filter='*decode_timing_llama*' >$OUT/ncu.log 2>&1
  echo "ncu rc $?"; grep -E "argmax_kernel|embed_kernel|lm_head|gpu__time_duration|dram__bytes" $OUT/ncu.log | head -30
  cat $OUT/ncu.log >>$L
fi
rm -f $OUT/t.log $OUT/ncu.log
