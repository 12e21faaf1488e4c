#!/usr/bin/env bash
# run 2 (the lm_head axis): the llm device tests (the fp8 weights test now also with the LM head
# quantised), the products search with each pick's L2-warm time, then itera bench llm at batch 1
# (bf16; fp8 with the LM head bf16 and fp8) and at batch 64 (fp8, both LM heads)
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
    keys=[k for k in m if any(t in k for t in ('tpot','output_tokens_per_s','throughput/bytes','decode_tokens_per_s','quality/logits_rel','quality/top1'))]
    a=d['axes']
    print(d.get('status'), d.get('message','')[:200], {x: a.get(x) for x in ('batch','weights','lm_head')}, {k: round(m[k],5) if isinstance(m[k],float) else m[k] for k in keys}, 'n', d['stats']['device']['count'])
PY
}
timeout 300 $B/itera_device_tests --gtest_filter='llm*:-*timing*' > $OUT/llm_tests.log 2>&1; echo "llm tests rc=$?"; tail -1 $OUT/llm_tests.log
grep -E "^\[  FAILED|Failure" $OUT/llm_tests.log | head; grep -E "fp8 weights and LM head|fp8 prefill logits" $OUT/llm_tests.log | head -12
ITERA_LLM_PRODUCTS_SEARCH=1 timeout 100 $B/itera_device_tests --gtest_filter='*products_timing*' > $OUT/search.log 2>&1; echo "search rc=$?"
timeout 200 $B/itera bench llm --max-time 15 -a batch=1 -a weights=bf16,fp8_e4m3 -a lm_head=16bit,fp8_e4m3 -o $OUT/bench_b1.jsonl > $OUT/bench_b1.md 2>&1; echo "b1 rc=$?"
timeout 150 $B/itera bench llm --max-time 10 -a batch=64 -a weights=fp8_e4m3 -a lm_head=16bit,fp8_e4m3 -o $OUT/bench_b64.jsonl > $OUT/bench_b64.md 2>&1; echo "b64 rc=$?"
grep -E "candidates|heuristic's first" $OUT/search.log
s $OUT/bench_b1.jsonl; s $OUT/bench_b64.jsonl
