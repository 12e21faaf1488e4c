#!/usr/bin/env bash
# Session 22, call 3: programmatic dependent launch with work before the wait: the fused products'
# producer asks for w's first stages before griddepcontrol.wait (x's after), the wide decode
# attention issues its cache tiles before it (rope.early). A = 615a925 (itera_device_tests_615a925),
# B = this build with ITERA_LLM_PDL unset (0) and =1.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
one() {  # label binary pdl batch
  ITERA_LLM_PDL=$3 ITERA_LLM_TIMING_BATCH=$4 timeout 60 $2 --gtest_filter='*decode_timing_llama*' > $OUT/t.log 2>&1
  step=$(grep -oE "CUDA graph: [0-9.]+ ms/step" $OUT/t.log | grep -oE "[0-9.]+")
  tab=$(sed -n '/graph step by kernel/,/in order/p' $OUT/t.log | grep -E "fused_product|attention|rms_norm|a step" | awk '{print $1, $NF}' | tr '\n' ';')
  echo "batch $4 $1: graph $step ms | $tab" | tee -a $OUT/ab.txt
  cp $OUT/t.log $OUT/b$4_$1.log
}
for b in 64 16 8; do
  for r in 1 2; do
    one a615 $B/itera_device_tests_615a925 0 $b
    one pdl0 $B/itera_device_tests 0 $b
    one pdl1 $B/itera_device_tests 1 $b
  done
done
one pdl0 $B/itera_device_tests 0 1; one pdl1 $B/itera_device_tests 1 1
rm -f $OUT/t.log
ITERA_LLM_PDL=1 timeout 220 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/llm_tests_pdl1.log 2>&1
echo "llm tests PDL=1 rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/llm_tests_pdl1.log | head
timeout 100 $B/itera_device_tests --gtest_filter='*fused_products*:*rope_in_decode*:*decode_step*:*prefill*' > $OUT/llm_tests_pdl0.log 2>&1
echo "subset PDL=0 rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/llm_tests_pdl0.log | head
ITERA_LLM_PDL=1 timeout 100 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/b64_pdl1.jsonl > $OUT/b64_pdl1.md 2>&1; echo "bench pdl1 rc=$?"
cat $OUT/ab.txt | cut -c1-200
grep -E "^\| batch=|tpot" $OUT/b64_pdl1.md | head -3
