#!/usr/bin/env bash
# Session 25, call 2, on the median-repetition commit: the causal-prefill test at 684 tokens, then the
# issue's benches: the 2048-token prefill held 4 s (two rounds) and decode b1/b64 bf16/fp8 --max-time 10.
# Each figure now from the median repetition; the means (latency/*_mean) beside them.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_cuda.long_causal_prefill_on_each_attention_kernel' > $OUT/tests.log 2>&1
echo "causal test rc=$?"; grep -E "684 tokens|^\[  (PASSED|FAILED) |Failure" $OUT/tests.log | head -20
for r in 1 2; do
  timeout 60 $B/itera bench llm --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/held_r$r.jsonl > $OUT/held_r$r.md 2>&1
  echo "held round $r rc=$?"
done
timeout 200 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/decode.jsonl > $OUT/decode.md 2>&1; echo "decode rc=$?"
python3 - "$OUT" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
for f in sorted(glob.glob(os.path.join(out, '*.jsonl'))):
    ceil = {}
    for line in open(f):
        j = json.loads(line)
        if j.get('type') == 'ceiling': ceil[j['key']] = j['value']
        if j.get('type') != 'case' or j.get('workload') != 'llm': continue
        m = {x['name']: x['value'] for x in j['metrics']}
        ax = dict(j['axes']) if isinstance(j['axes'], dict) else {a[0]: a[1] for a in j['axes']} if isinstance(j['axes'], list) and j['axes'] and isinstance(j['axes'][0], list) else j['axes']
        key = ' '.join(f"{k}={ax.get(k)}" for k in ('batch', 'weights', 'prompt', 'output'))
        pf = m.get('throughput/prefill_flops', 0); ttft = m.get('latency/ttft', 0); ttm = m.get('latency/ttft_mean', ttft)
        g = ceil.get('gemm.bf16', 0); c = ceil.get('copy.d2d', 0)
        s = f"{os.path.basename(f)} {key}: ttft {ttft*1e3:.2f} ms (mean {ttm*1e3:.2f})"
        if g: s += f", prefill {pf/1e12:.1f} TFLOP/s = {100*pf/g:.1f}% of {g/1e12:.1f} (by mean {100*pf*ttft/ttm/g:.1f}%)"
        if 'latency/tpot' in m:
            t = m['latency/tpot']; tm = m.get('latency/tpot_mean', t); db = m.get('throughput/decode_bytes', 0)
            s += f"; tpot {t*1e3:.3f} ms (mean {tm*1e3:.3f}), {m['throughput/decode_tokens_per_s']:.0f} tok/s, {100*db/c:.1f}% of {c/1e12:.2f} TB/s (by mean {100*db*t/tm/c:.1f}%)"
        print(s)
PY
cd $OUT && tar czf logs.tgz *.log *.md *.jsonl && rm -f *.log *.md *.jsonl
