#!/usr/bin/env bash
# Session 2026-12-01 (twenty-first), run 1 = last session's run21_not_run.sh on 08e4bc0: the issue's
# benches with the graph-timed product trial and the embedding's counters, the LLM device tests, the
# batch-64 graph kernel table (the review's mends).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
s() { python3 - "$1" <<'PY'
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    if d.get('type')!='case': continue
    m={x['name']:x.get('value') for x in d['metrics']}
    if 'model' not in d.get('axes', {}): continue
    keys=[k for k in m if any(t in k for t in ('tpot','ttft','output_tokens_per_s','prefill_flops','utilisation','throughput/bytes'))]
    a=d['axes']
    print(d.get('status'), {x: a.get(x) for x in ('batch','weights','prompt','output')}, {k: round(m[k],5) if isinstance(m[k],float) else m[k] for k in keys})
PY
}
timeout 300 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run1_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/run1_llm_tests.log | head
timeout 110 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/run1_prefill.jsonl > $OUT/run1_prefill.md 2>&1; echo "prefill rc=$?"; s $OUT/run1_prefill.jsonl
timeout 200 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/run1_decode.jsonl > $OUT/run1_decode.md 2>&1; echo "decode rc=$?"; s $OUT/run1_decode.jsonl
ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run1_b64.log 2>&1
echo "b64 timing rc=$?"; sed -n '/graph step by kernel/,/decode step by stage/p' $OUT/run1_b64.log | head -30
