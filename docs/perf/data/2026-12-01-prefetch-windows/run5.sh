#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 5: run 4's order-dependent failure (bf16 compute, fp8
# weights, batch 1, after a bf16 llama-shape engine): which global memory the test reads before
# anything wrote it (compute-sanitizer initcheck), on the test alone.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 400 $CS --tool initcheck --print-limit 30 $B/itera_device_tests --gtest_filter='llm_fused_gemv.engine_batch_1*' > $OUT/run5_initcheck.log 2>&1
echo "initcheck rc=$?"; grep -E "ERROR SUMMARY|Uninitialized" $OUT/run5_initcheck.log | sort | uniq -c | head
grep -A6 "Uninitialized" $OUT/run5_initcheck.log | grep -E "at |by thread|Address|kernel|Host Frame" | sort | uniq -c | sort -rn | head -30
