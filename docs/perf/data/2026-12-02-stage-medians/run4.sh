#!/usr/bin/env bash
# Session 25, call 4 (a probe, no code change): cuBLASLt on the 2048-token prefill's own product shapes
# (gate/up, down, qkv, o_proj; D[M=2048][N] = A[2048][K] x B) and on 8192^3, each held 4 s, and the
# prefill held 4 s; nvidia-smi sampling SM clock and power every 100 ms through each.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
probe() {  # label, then the bench arguments
  local label=$1; shift
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > $OUT/smi_$label.csv &
  local smi=$!
  timeout 90 $B/itera bench "$@" -o $OUT/$label.jsonl > $OUT/$label.md 2>&1; local rc=$?
  kill $smi; wait $smi 2>/dev/null
  python3 - $OUT/smi_$label.csv $OUT/$label.jsonl $label $rc <<'PY'
import sys, json, statistics as st
rows = [l.split(',') for l in open(sys.argv[1]) if l.strip() and 'N/A' not in l]
busy = [(float(a), float(b), float(c)) for a, b, c in rows if float(b) > 300]  # samples under load
tail = busy[len(busy) // 4:]
for line in open(sys.argv[2]):
    j = json.loads(line)
    if j.get('type') != 'case' or j.get('role') == 'ceiling': continue
    m = {x['name']: x['value'] for x in j['metrics']}
    rate = m.get('throughput/prefill_flops', m.get('throughput/flops', 0))
    print(f"{sys.argv[3]} rc={sys.argv[4]} {' '.join(f'{k}={v}' for k, v in j['axes'].items() if k in ('M','N','K','prompt'))}: "
          f"{rate/1e12:.1f} TFLOP/s, {j['stats']['device']['count']} samples; busy samples {len(busy)}: "
          f"SM {st.mean(x[0] for x in tail):.0f} MHz, {st.mean(x[1] for x in tail):.0f} W, {max(x[2] for x in tail):.0f} C")
PY
}
G="gemm --no-ceilings --no-verify --min-time 4 --max-time 4 -a format=bf16"
probe gate_up $G -a M=2048 -a N=28672 -a K=4096
probe down $G -a M=2048 -a N=4096 -a K=14336
probe qkv $G -a M=2048 -a N=6144 -a K=4096
probe o_proj $G -a M=2048 -a N=4096 -a K=4096
probe g8192 $G -a M=8192 -a N=8192 -a K=8192
probe prefill llm --no-ceilings --min-time 4 --max-time 4 -a prompt=2048 -a output=1
probe g8192b $G -a M=8192 -a N=8192 -a K=8192
cd $OUT && tar czf logs.tgz *.md *.jsonl *.csv && rm -f *.md *.jsonl *.csv
