#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 11: the review's mends (the commit after d1b96b7): every
# device test; the batch-64 graph step (bf16, fp8); the batch-64 bench; the server run of runs 2
# and 8 and its warm-up.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
s=$(date +%s%3N)
timeout 300 $B/itera_device_tests > $OUT/run11_all_tests.log 2>&1; echo "all device tests rc=$? $(( $(date +%s%3N) - s )) ms"; grep -E "^\[  PASSED|^\[  FAILED|tests from .* ran" $OUT/run11_all_tests.log | head -5; grep -E "graph with the trials" $OUT/run11_all_tests.log
for w in bf16 fp8_e4m3; do
  ITERA_LLM_TIMING_WEIGHTS=$w ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $w"; cat /tmp/t.log; } >> $OUT/run11_stages.log
  echo "$w b64: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/.*context ~[0-9]*, CUDA graph: //; s/,.*//')"
done
timeout 90 $B/itera bench llm --no-ceilings --max-time 8 -a batch=64 -o $OUT/run11_bench_b64.jsonl > $OUT/run11_bench_b64.md 2>&1
echo "bench b64 rc=$?"
s=$(date +%s%3N)
timeout 150 $B/itera bench llm --no-ceilings -a scenario=server -a batch=64 -a rate=16 -a requests=256 -a ttft_ms=1000 -a tpot_ms=50 -o $OUT/run11_server.jsonl > $OUT/run11_server.md 2>&1
echo "server rc=$? $(( $(date +%s%3N) - s )) ms wall"
python3 - $OUT/run11_bench_b64.jsonl $OUT/run11_server.jsonl <<'PY'
import json,sys
for f in sys.argv[1:]:
    for line in open(f):
        d=json.loads(line)
        for m in d.get('metrics',[]):
            n=m['name']
            if n in ('throughput/decode_tokens_per_s','throughput/decode_bytes','latency/tpot') or any(k in n for k in ('ttft/p99','tpot/p99','itl/p99','e2e/p99','goodput')):
                print(' ',n,round(m['value'],5))
PY
