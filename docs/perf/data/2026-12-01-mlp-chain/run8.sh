#!/usr/bin/env bash
# Run 8: the probe's variants, 32 layers, two rounds: as run 7; no x box; consumers not
# multiplying; neither (the weights' stream and the phases' counters alone); four copies of 8 KiB a
# stage, with and without the rest.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for round in 1 2; do
  for v in "0 0 1" "1 0 1" "0 1 1" "1 1 1" "0 0 4" "1 1 4"; do
    set -- $v
    f=$OUT/run8_nox$1_nomma$2_copies$3_r$round.log
    ITERA_X_PROBE=1 ITERA_X_PROBE_NOX=$1 ITERA_X_PROBE_NOMMA=$2 ITERA_X_PROBE_COPIES=$3 timeout 60 $B/itera_device_tests --gtest_filter='llm_probe.*' > $f 2>&1
    echo "round $round no_x $1 no_mma $2 copies $3 rc=$? $(grep 'probe:' $f | tail -2 | sed 's/probe: 32 layers, //' | tr '\n' ' ')"
  done
done
