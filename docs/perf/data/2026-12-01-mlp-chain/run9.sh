#!/usr/bin/env bash
# Run 9: the probe's units dealt round-robin (ITERA_X_PROBE_DEAL=1: unit u to block u % blocks, so
# the copies in flight at once are adjacent in memory; no stores) against contiguous ranges (run 8),
# with and without the x box and the products; two rounds.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for round in 1 2; do
  for v in "0 0 0" "0 0 1" "1 1 0" "1 1 1" "1 0 1"; do
    set -- $v
    f=$OUT/run9_nox$1_nomma$2_deal$3_r$round.log
    ITERA_X_PROBE=1 ITERA_X_PROBE_NOX=$1 ITERA_X_PROBE_NOMMA=$2 ITERA_X_PROBE_DEAL=$3 timeout 60 $B/itera_device_tests --gtest_filter='llm_probe.*' > $f 2>&1
    echo "round $round no_x $1 no_mma $2 deal $3 rc=$? $(grep 'probe:' $f | tail -2 | sed 's/probe: 32 layers, //' | tr '\n' ' ')"
  done
done
