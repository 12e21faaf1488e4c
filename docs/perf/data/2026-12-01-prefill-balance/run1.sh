#!/usr/bin/env bash
# run 1: correctness of the new binary (device tests), the 2048-token prefill's stage table base/new,
# the decode step's one deck (ITERA_X_DEAL) A/B at batch 1
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 200 $B/dt_new --gtest_filter='-*timing*' > $OUT/device_tests_new.log 2>&1; echo "device tests new rc=$?"; tail -3 $OUT/device_tests_new.log; grep -E "^\[  FAILED" $OUT/device_tests_new.log | head
f=$OUT/prefill.log
for r in 1 2; do for v in base new; do
  echo "=== round $r $v" >> $f
  ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $B/dt_$v --gtest_filter='*prefill_timing*' >> $f 2>&1
  echo "r$r $v: $(grep 'per call' $f | tail -1 | sed -E 's/.*compute: //') | $(grep -E '/attention |/swiglu |/rope |sum of' $f | tail -4 | awk '{printf "%s %s; ", $1, $(NF-1)}')"
done; done
timeout 330 bash scripts/device_decode_ab.sh bb.tgz $OUT/ab --rounds 3 --step-test base=dt_base deck=dt_new nodeck=dt_new,ITERA_X_DEAL=0 2>&1 | tail -25
