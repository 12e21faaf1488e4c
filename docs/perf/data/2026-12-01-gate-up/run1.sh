#!/usr/bin/env bash
# run 1: the fused gate/up + SwiGLU kernel: its own test, the engine tests whose prefill takes it
# (666 rows), then the 2048-token prefill's stage table with it off (ITERA_LLM_FUSED_GATE_UP=0) and
# on, alternating, and the prefill bench with it on and off
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_gate_up.*:*long_causal_prefill*:*long_prefill*:vit_gemm.*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.log; grep -E "^\[  FAILED|^\[       OK|worst sampled|Failure|error" $OUT/tests.log | head -20
for r in 1 2; do for v in 0 512; do
  ITERA_LLM_FUSED_GATE_UP=$v ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/prefill_${v}_$r.log 2>&1
  echo "== r$r fused_from=$v"; grep -E "gate_up|swiglu|down |sum of|per call" $OUT/prefill_${v}_$r.log
done; done
for v in 512 0; do
  ITERA_LLM_FUSED_GATE_UP=$v timeout 120 $B/itera bench llm --max-time 8 -a prompt=2048 -a output=1 -o $OUT/bench_prefill_$v.jsonl > $OUT/bench_prefill_$v.md 2>&1; echo "prefill bench $v rc=$?"
  python3 -c "
import json
for l in open('$OUT/bench_prefill_$v.jsonl'):
    d=json.loads(l)
    if d.get('type')=='case' and 'model' in d.get('axes',{}):
        m={x['name']:x.get('value') for x in d['metrics']}
        print({k:m[k] for k in ('latency/ttft','throughput/prefill_flops','utilisation/prefill/gemm.bf16')}, d['throttle'].get('sm_clock_mhz_min'), d['throttle'].get('sm_clock_mhz_max'))
"
done
