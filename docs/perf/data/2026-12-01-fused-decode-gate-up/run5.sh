#!/usr/bin/env bash
# Session 2026-12-01 (twenty-first), run 5: the session's code (the fused gate/up at 16-64 rows,
# RoPE in the tensor-core decode attention, the rotating-kernel check fixed): every device test but
# the timing ones, then the issue's benches (2048-token prefill; batch 1 and 64, bf16 and fp8 weights).
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
    keys=[k for k in m if any(t in k for t in ('tpot','ttft','decode_tokens_per_s','utilisation'))]
    a=d['axes']
    print(d.get('status'), {x: a.get(x) for x in ('batch','weights','prompt','output')}, {k: round(m[k],5) if isinstance(m[k],float) else m[k] for k in keys})
PY
}
timeout 330 $B/itera_device_tests --gtest_filter='-*timing*:*search*' > $OUT/run5_device_tests.log 2>&1
echo "device tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|RoPE in the decode" $OUT/run5_device_tests.log | head -20
timeout 90 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/run5_prefill.jsonl > $OUT/run5_prefill.md 2>&1; echo "prefill rc=$?"; s $OUT/run5_prefill.jsonl
timeout 150 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/run5_decode.jsonl > $OUT/run5_decode.md 2>&1; echo "decode rc=$?"; s $OUT/run5_decode.jsonl
grep -E "^\| batch=" $OUT/run5_decode.md
