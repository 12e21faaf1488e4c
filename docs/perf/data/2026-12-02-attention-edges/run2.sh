#!/usr/bin/env bash
# Session 22, call 2: the wide decode attention's prologue (q's and the new row's loads before the
# ring's copies, all three ring tiles issued up front) and epilogue (the two warps' states merged in
# registers, one barrier): A = 14bb088 (bb/bin/itera_device_tests), B = the change (_new).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
ab() {  # batch rounds
  for r in $(seq 1 $2); do
    for v in old new; do
      bin=$B/itera_device_tests; [ $v = new ] && bin=$B/itera_device_tests_new
      ITERA_LLM_TIMING_BATCH=$1 timeout 60 $bin --gtest_filter='*decode_timing_llama*' > $OUT/t.log 2>&1
      step=$(grep -oE "CUDA graph: [0-9.]+ ms/step" $OUT/t.log | grep -oE "[0-9.]+")
      att=$(sed -n '/graph step by kernel/,/in order/p' $OUT/t.log | grep -i attention | head -2 | tr -s ' ' | tr '\n' ';')
      echo "batch $1 round $r $v: graph $step ms | $att" | tee -a $OUT/ab.txt
      [ $r = 1 ] && cp $OUT/t.log $OUT/b$1_$v.log
    done
  done
}
ab 64 3; ab 16 2; ab 8 2; ab 2 2
rm -f $OUT/t.log
timeout 240 $B/itera_device_tests_new --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/llm_tests_new.log 2>&1
echo "llm tests (new) rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/llm_tests_new.log | head
timeout 120 $B/itera_new bench llm --max-time 10 -a batch=64 -o $OUT/b64_new.jsonl > $OUT/b64_new.md 2>&1; echo "bench new rc=$?"

cat $OUT/ab.txt
grep -E "^\| batch=" $OUT/b64_new.md
