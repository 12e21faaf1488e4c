#!/usr/bin/env bash
# run 3: the fp8 decode step's consumers with conflict-free loads (a step = 128 consecutive inputs of
# a row; even rows' chunks as A's rows 0-7, odd rows' as 8-15; x in B's columns 0-3) and x kept in
# registers (new), the same without x kept (nokept), against 1c2a260 (old): the decode-step test
# on each, three rounds alternating, the new trace; then the llm device tests on new
set -uo pipefail
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --step-test --rounds 3 --trace new \
  old=dt_old new=itera_device_tests nokept=dt_nokept
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
timeout 200 bb/bin/itera_device_tests --gtest_filter='llm*:-*timing*' > $OUT/tests_new.log 2>&1; echo "llm tests new rc=$?"; tail -1 $OUT/tests_new.log
grep -E "^\[  FAILED|Failure" $OUT/tests_new.log | head; grep -E "logits one kernel" $OUT/all.log | head -30
