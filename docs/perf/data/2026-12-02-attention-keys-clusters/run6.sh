#!/usr/bin/env bash
# Session 24, call 6: the fused products' consumer warpgroups end their tiles each on its own
# (a named barrier a warpgroup, staged_full counting both, one 256-thread barrier after the loop),
# so that one's SwiGLU/staging can run under the other's products; the second warpgroup started
# ITERA_X_STAGGER ns late (experiment knob) to break the symmetry. A/B against 9bb50a3's kernel
# (old/, same test binary change), alternating, 2048-token prefill stage table.
set -uo pipefail
tar xJf bb.txz; mkdir -p old && tar xJf bo.txz -C old
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for st in 0 2000; do
  ITERA_X_STAGGER=$st LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64 timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_products.*' > $OUT/fused_s$st.log 2>&1
  echo "fused products stagger=$st rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/fused_s$st.log
done
table() {  # name, bundle dir, stagger
  ITERA_X_STAGGER=$3 LD_LIBRARY_PATH=$PWD/$2/lib:/usr/local/cuda/lib64 ITERA_LLM_PREFILL_TOKENS=2048 timeout 90 $2/bin/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/table_$1.log 2>&1
  echo "$1 rc=$?: $(grep -E 'qkv  ' $OUT/table_$1.log | awk '{print "qkv",$3}') $(grep -E 'gate_up' $OUT/table_$1.log | awk '{print "gate_up",$3,$4}') $(grep -E 'whole pass' $OUT/table_$1.log | awk '{print "pass",$3,$4}')"
}
for r in 1 2; do
  table old_r$r old/bb 0
  table s0_r$r bb 0
  table s1000_r$r bb 1000
  table s2000_r$r bb 2000
  table s4000_r$r bb 4000
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
