#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 1 (last session's run13_not_run.sh:
# first call, on the final commit): issue 3's benches on the final code. Bundle build/itera and
# build/tests/itera_device_tests into bb.tgz (carry it). The serving tests' helper (2781e21) ran
# on no GPU yet: the device tests first.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 300 $B/itera_device_tests > $OUT/run1_all_tests.log 2>&1; echo "device tests rc=$?"; grep -E "^\[  PASSED|^\[  FAILED" $OUT/run1_all_tests.log
# The 2048-token prefill (the bench's stop rule), bf16 batch 1, fp8 batch 1 (default LM head and
# an fp8 one), batch 64: one bench, one ceiling run.
timeout 240 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/run1_prefill.jsonl > $OUT/run1_prefill.md 2>&1; echo "prefill rc=$?"
timeout 300 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/run1_decode.jsonl > $OUT/run1_decode.md 2>&1; echo "decode rc=$?"
timeout 120 $B/itera bench llm --max-time 10 -a weights=fp8_e4m3 -a lm_head=fp8_e4m3 -o $OUT/run1_fp8_head.jsonl > $OUT/run1_fp8_head.md 2>&1; echo "fp8 head rc=$?"
python3 - $OUT/run1_prefill.jsonl $OUT/run1_decode.jsonl $OUT/run1_fp8_head.jsonl <<'PY'
import json,sys
for f in sys.argv[1:]:
    for line in open(f):
        d=json.loads(line)
        if 'metrics' not in d: continue
        ax=d.get('axes',{})
        got={m['name']:m['value'] for m in d['metrics']}
        keep=[k for k in got if k.startswith('throughput/') or k.startswith('utilisation/') or k in ('latency/tpot','latency/ttft')]
        print(f.split('/')[-1], {k:ax.get(k) for k in ('batch','weights','lm_head','prompt') if k in ax}, {k:round(got[k],4) for k in keep}, d.get('note',''))
PY
