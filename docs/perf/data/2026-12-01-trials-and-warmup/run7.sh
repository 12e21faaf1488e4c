#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 7 (e559e19): the server scenario's warm-up (4 requests, wall
# time, against 726373c's binary, which captures inside the run); the trials on and off, alternating:
# fp8 weights at batch 64, bf16 at 32 and 16; then every device test.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ms() { date +%s%3N; }
for who in itera itera_old itera itera_old; do
  s=$(ms)
  timeout 200 $B/$who bench llm --no-ceilings -a scenario=server -a batch=64 -a rate=100 -a requests=4 -o /tmp/warm_${who}_$s.jsonl > /dev/null 2>&1
  echo "server 4 requests, $who: rc=$? $(( $(ms) - s )) ms wall"
done
one() {  # label, env...
  local label=$1; shift
  env "$@" timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run7_stages.log
  echo "$label: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/.*context ~[0-9]*, CUDA graph: //; s/,.*//')"
}
for round in 1 2; do
  for t in 0 1; do
    one "r$round fp8 b64 trials $t" ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=64 ITERA_LLM_PRODUCT_TRIAL=$t ITERA_LLM_SPLIT_TRIAL=$t
    for b in 32 16; do one "r$round bf16 b$b trials $t" ITERA_LLM_TIMING_BATCH=$b ITERA_LLM_PRODUCT_TRIAL=$t ITERA_LLM_SPLIT_TRIAL=$t; done
  done
done
s=$(ms)
timeout 420 $B/itera_device_tests > $OUT/run7_all_tests.log 2>&1; echo "all device tests rc=$? $(( $(ms) - s )) ms"; tail -3 $OUT/run7_all_tests.log; grep -E "^\[  FAILED|SKIPPED \]" $OUT/run7_all_tests.log | head
