#!/usr/bin/env bash
# run 5 (bd9d970): the 2048-token prefill's stage table on the session's code (the warp-specialized
# attention the default), two rounds, for where the held prefill's last 0.2% to 80% would come from
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
for r in 1 2; do
  ITERA_LLM_PREFILL_TOKENS=2048 timeout 120 bb/bin/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/prefill_r$r.log 2>&1
  echo "round $r rc=$?"; grep -vE "^\[|^$|Note:" $OUT/prefill_r$r.log | head -40
done
