#!/usr/bin/env bash
# run 4 (the session's code: the warp-specialized prefill attention the default): itera bench llm as
# issue 3 names its targets (the 2048-token prefill with the bench's stop rule and held 4 s, both
# against the GEMM ceiling measured in the same run; batch 1 bf16 and fp8 weights; batch 64), then
# every device test
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
    keys=[k for k in m if any(t in k for t in ('tpot','ttft','output_tokens_per_s','prefill_flops','utilisation','throughput/bytes','decode_tokens_per_s'))]
    a=d['axes']
    print(d.get('status'), {x: a.get(x) for x in ('batch','weights','prompt','output')}, {k: round(m[k],5) if isinstance(m[k],float) else m[k] for k in keys}, 'n', d['stats']['device']['count'])
PY
}
timeout 100 $B/itera bench llm --max-time 15 -a prompt=2048 -a output=1 -o $OUT/bench_prefill.jsonl > $OUT/bench_prefill.md 2>&1; echo "prefill rc=$?"; s $OUT/bench_prefill.jsonl
timeout 150 $B/itera bench llm --max-time 15 -a batch=1 -a weights=bf16,fp8_e4m3 -o $OUT/bench_b1.jsonl > $OUT/bench_b1.md 2>&1; echo "b1 rc=$?"; s $OUT/bench_b1.jsonl
timeout 100 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/bench_b64.jsonl > /dev/null 2>&1; echo "b64 rc=$?"; s $OUT/bench_b64.jsonl
timeout 100 $B/itera bench llm --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/bench_prefill_held.jsonl > /dev/null 2>&1; echo "prefill held rc=$?"; s $OUT/bench_prefill_held.jsonl
timeout 240 $B/itera_device_tests --gtest_filter='-*timing*' > $OUT/device_tests.log 2>&1; echo "device tests rc=$?"; tail -2 $OUT/device_tests.log; grep -E "^\[  FAILED" $OUT/device_tests.log | head
