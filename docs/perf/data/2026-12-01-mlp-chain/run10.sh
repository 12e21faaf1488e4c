#!/usr/bin/env bash
# Run 10: run 9's contiguous ranges without their segments' stores (ITERA_X_PROBE_NOSTORE=1), so
# that both dealings store nothing; round-robin beside; two rounds.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for round in 1 2; do
  for v in "0 0" "1 0" "0 1"; do
    set -- $v
    f=$OUT/run10_nostore$1_deal$2_r$round.log
    ITERA_X_PROBE=1 ITERA_X_PROBE_NOSTORE=$1 ITERA_X_PROBE_DEAL=$2 timeout 60 $B/itera_device_tests --gtest_filter='llm_probe.*' > $f 2>&1
    echo "round $round no_store $1 deal $2 rc=$? $(grep 'probe:' $f | tail -2 | sed 's/probe: 32 layers, //' | tr '\n' ' ')"
  done
done
