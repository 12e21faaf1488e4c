#!/usr/bin/env bash
# run 7: the causal prefill attention at three blocks an SM (causal_attention_kernel; ITERA_X_CAUSAL3=0
# the two-block kernel): attention and prefill device tests, then the 2048-token prefill's stage
# table, the two kernels alternating
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 150 $B/dt_c3 --gtest_filter='*attention*:*prefill*:-*timing*' > $OUT/attention_tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/attention_tests.log; grep -E "^\[  FAILED|normalised difference|worst sampled" $OUT/attention_tests.log | head -12
f=$OUT/prefill.log
for r in 1 2; do for v in two three; do
  x=1; [ $v = two ] && x=0
  echo "=== round $r $v" >> $f
  ITERA_X_CAUSAL3=$x ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $B/dt_c3 --gtest_filter='*prefill_timing*' >> $f 2>&1
  echo "r$r $v: $(grep -E '/attention |sum of' $f | tail -2 | awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}')"
done; done
