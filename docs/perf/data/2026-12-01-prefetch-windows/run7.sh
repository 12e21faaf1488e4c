#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 7: run 4's order-dependent failure as an access past a
# buffer into its neighbour? compute-sanitizer memcheck with padding between allocations, the
# failing test alone, then the fused-gemv and fusion suites.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for f in 'llm_fused_gemv.engine_batch_1*' 'llm_fused_gemv.*:llm_decode_fusions.*:llm_cuda.wide*:llm_cuda.prepared*'; do
  timeout 250 $CS --tool memcheck --padding 4096 --print-limit 200 $B/itera_device_tests --gtest_filter="$f" > /tmp/mc.log 2>&1
  echo "memcheck [$f] rc=$?"; cat /tmp/mc.log >> $OUT/run7_memcheck.log
  grep -E "ERROR SUMMARY|^\[  PASSED|^\[  FAILED  \] [0-9]" /tmp/mc.log
  grep -E "^========= (Invalid|Out|Misaligned)|^=========     at " /tmp/mc.log | sed 's/(T1.*//; s/+0x.*//' | sort | uniq -c | sort -rn | head -12
done
