#!/usr/bin/env bash
# Session 2026-12-01 (sixteenth), run 7: the session's code (split residual products, the wide
# decode attention from 16 pairs with its keys over clusters of up to 8). The llm device tests;
# itera bench llm at batch 8, 16, 32, 64 (offline, compute loop, the bench's other defaults).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 230 $B/itera_device_tests --gtest_filter='llm*:-*timing*' > $OUT/run7_llm_tests.log 2>&1; echo "llm tests rc=$?"; tail -2 $OUT/run7_llm_tests.log; grep -E "^\[  FAILED" $OUT/run7_llm_tests.log | head
s() { python3 - "$1" <<'PY'
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    if d.get('type')!='case' or 'model' not in d.get('axes',{}): continue
    m={x['name']:x.get('value') for x in d['metrics']}
    keys=[k for k in m if any(t in k for t in ('tpot','decode_tokens_per_s','throughput/decode_bytes','utilisation/decode'))]
    a=d['axes']
    print(d.get('status'), d.get('message','')[:200], {x: a.get(x) for x in ('batch','weights')}, {k: round(m[k],5) if isinstance(m[k],float) else m[k] for k in keys}, 'n', d.get('stats',{}).get('device',{}).get('count'))
PY
}
timeout 200 $B/itera bench llm --max-time 8 -a batch=64,32,16,8 -o $OUT/run7_bench.jsonl > $OUT/run7_bench.md 2>&1; echo "bench rc=$?"
s $OUT/run7_bench.jsonl
