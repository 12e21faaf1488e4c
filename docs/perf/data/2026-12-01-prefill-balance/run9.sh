#!/usr/bin/env bash
# run 9: the causal attention before (c3, run 7's binary) and after the tile_pass refactor (final),
# alternating: the 2048-token prefill's attention stage
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
f=$OUT/prefill.log
for r in 1 2 3; do for v in c3 final; do
  echo "=== round $r $v" >> $f
  ITERA_LLM_PREFILL_TOKENS=2048 timeout 60 $B/dt_$v --gtest_filter='*prefill_timing*' >> $f 2>&1
  echo "r$r $v: $(grep -E '/attention |/gate_up |sum of' $f | tail -3 | awk '{printf "%s %s; ", $1, $(NF-1)}')"
done; done
