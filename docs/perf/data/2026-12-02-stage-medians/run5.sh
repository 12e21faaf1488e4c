#!/usr/bin/env bash
# Session 25, call 5, on the batched-ceiling commit: the ceilings measured as batches of launches
# (>= 20 ms a sample); the 2048-token prefill held 4 s three rounds; decode b1/b64 bf16/fp8 --max-time 10.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for r in 1 2 3; do
  timeout 80 $B/itera bench llm --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/held_r$r.jsonl > $OUT/held_r$r.md 2>&1
  echo "held round $r rc=$?"
done
timeout 200 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/decode.jsonl > $OUT/decode.md 2>&1; echo "decode rc=$?"
python3 /dev/stdin "$OUT" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], '*.jsonl'))):
    ceil = {}
    for line in open(f):
        j = json.loads(line)
        if j.get('type') == 'ceiling': ceil[j['key']] = j['value']
        if j.get('type') == 'case' and j.get('role') == 'ceiling':
            d, h = j['samples']['device_ns'], j['samples']['host_ns']
            print(f"{os.path.basename(f)} ceiling {j['workload']} {j['axes']}: launches a sample {j['details'].get('sample.launches')}, {len(d)} samples, device/host {sum(d)/sum(h):.3f}")
        if j.get('type') != 'case' or j.get('workload') != 'llm': continue
        m = {x['name']: x['value'] for x in j['metrics']}
        key = ' '.join(f"{k}={j['axes'].get(k)}" for k in ('batch', 'weights', 'prompt'))
        t, tm, pf, g, c = m['latency/ttft'], m['latency/ttft_mean'], m['throughput/prefill_flops'], ceil['gemm.bf16'], ceil['copy.d2d']
        s = f"{os.path.basename(f)} {key}: ttft {t*1e3:.2f} ms (mean {tm*1e3:.2f}), {pf/1e12:.1f} TFLOP/s = {100*pf/g:.1f}% of {g/1e12:.1f} (by mean {100*pf*t/tm/g:.1f}%)"
        if 'latency/tpot' in m:
            db = m['throughput/decode_bytes']
            s += f"; tpot {m['latency/tpot']*1e3:.3f} ms, {m['throughput/decode_tokens_per_s']:.0f} tok/s, {100*db/c:.1f}% of {c/1e12:.3f} TB/s"
        print(s)
PY
cd $OUT && tar czf logs.tgz *.md *.jsonl && rm -f *.md *.jsonl
