#!/usr/bin/env bash
# Session 25, call 6, on the two-ceiling code: each GEMM ceiling measured one launch a sample
# (gemm.<f>, as independent measurements and issue 2 define it) and again as batches back to back
# (gemm.<f>.sustained); the 2048-token prefill held 4 s two rounds; decode b1/b64 bf16/fp8; the llm
# and workload device tests.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for r in 1 2; do
  timeout 90 $B/itera bench llm --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/held_r$r.jsonl > $OUT/held_r$r.md 2>&1
  echo "held round $r rc=$?"
done
timeout 200 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/decode.jsonl > $OUT/decode.md 2>&1; echo "decode rc=$?"
timeout 200 $B/itera_device_tests --gtest_filter='llm_cuda.*:*workload*:*Workload*:-*timing*' > $OUT/tests.log 2>&1
echo "device tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/tests.log | head -5
python3 /dev/stdin "$OUT" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], '*.jsonl'))):
    for line in open(f):
        j = json.loads(line)
        if j.get('type') == 'ceiling' and j['key'].startswith('gemm'): print(f"{os.path.basename(f)} {j['key']}: {j['value']/1e12:.1f} TFLOP/s ({j['how']})")
        if j.get('type') != 'case' or j.get('workload') != 'llm': continue
        m = {x['name']: x['value'] for x in j['metrics']}
        key = ' '.join(f"{k}={j['axes'].get(k)}" for k in ('batch', 'weights', 'prompt'))
        s = f"{os.path.basename(f)} {key}: ttft {m['latency/ttft']*1e3:.2f} ms, {m['throughput/prefill_flops']/1e12:.1f} TFLOP/s = {100*m['utilisation/prefill/gemm.bf16']:.1f}% of the ceiling, {100*m.get('utilisation/prefill/gemm.bf16.sustained', 0):.1f}% sustained"
        if 'latency/tpot' in m:
            s += f"; tpot {m['latency/tpot']*1e3:.3f} ms, {m['throughput/decode_tokens_per_s']:.0f} tok/s, {100*m['utilisation/decode/copy.d2d']:.1f}% of copy"
        print(s)
PY
cd $OUT && gzip tests.log && tar czf logs.tgz *.md *.jsonl tests.log.gz && rm -f *.md *.jsonl tests.log.gz
