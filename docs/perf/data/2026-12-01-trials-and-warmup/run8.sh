#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 8: the trials over as many layers as make four times the L2
# (trial_layers) against every layer (ITERA_LLM_TRIAL_LAYERS=32), alternating: bf16 batch 64 (three
# rounds), fp8 batch 64; the server scenario's warm-up against 726373c's; the server run of run 2.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
one() {  # label, env...
  local label=$1; shift
  env "$@" ITERA_LLM_TRIAL_LOG=1 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run8_stages.log
  echo "$label: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/.*context ~[0-9]*, CUDA graph: //; s/,.*//') | $(grep -o 'picked #[0-9]*' /tmp/t.log | tr '\n' ' ')"
}
for round in 1 2 3; do
  one "r$round b64 layers auto" ITERA_LLM_TIMING_BATCH=64
  one "r$round b64 layers 32" ITERA_LLM_TIMING_BATCH=64 ITERA_LLM_TRIAL_LAYERS=32
done
one "fp8 b64 layers auto" ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=64
one "fp8 b64 layers 32" ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=64 ITERA_LLM_TRIAL_LAYERS=32
ms() { date +%s%3N; }
for who in itera itera_old itera itera_old; do
  s=$(ms)
  timeout 200 $B/$who bench llm --no-ceilings -a scenario=server -a batch=64 -a rate=100 -a requests=4 -o /tmp/warm_${who}_$s.jsonl > /dev/null 2>&1
  echo "server 4 requests, $who: rc=$? $(( $(ms) - s )) ms wall"
done
timeout 150 $B/itera bench llm --no-ceilings -a scenario=server -a batch=64 -a rate=16 -a requests=256 -a ttft_ms=1000 -a tpot_ms=50 -o $OUT/run8_server.jsonl > $OUT/run8_server.md 2>&1
echo "server rc=$?"; python3 - $OUT/run8_server.jsonl <<'PY'
import json,sys
for line in open(sys.argv[1]):
    d=json.loads(line)
    for m in d.get('metrics',[]):
        if any(k in m['name'] for k in ('/p99','/p50','goodput')): print(' ',m['name'],round(m['value'],5))
PY
