#!/usr/bin/env bash
# run 1 (2a4c7d4): the warp-specialized prefill attention in its final form (last session's run14_not_run.sh):
# the prefill bench held 4 s with it and with the three-block kernel, alternating, two rounds; the llm device
# tests with it on; then the decode step's trace (batch 1, fp8 and bf16) as this session's baseline
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for r in 1 2; do for v in 1 0; do
  [ $r = 2 ] && v=$((1 - v))
  ITERA_PREFILL_ATTENTION_WS=$v timeout 40 $B/itera bench llm --no-ceilings --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/bench_r${r}_ws${v}.jsonl > /dev/null 2>&1; echo "bench r$r ws=$v rc=$?"
  python3 -c "
import json
for l in open('$OUT/bench_r${r}_ws${v}.jsonl'):
    d=json.loads(l)
    if d.get('type')=='case' and 'model' in d.get('axes',{}):
        m={x['name']:x.get('value') for x in d['metrics']}; s=d['stats']['device']
        print('r$r ws=$v ttft %.3f ms n %d min %.2f med %.2f drift %s TF %.1f' % (m['latency/ttft']*1e3, s['count'], s['min']/1e6, s['median']/1e6, s.get('drift'), m['throughput/prefill_flops']/1e12), d['throttle'].get('sm_clock_mhz_min'), d['throttle'].get('power_w_max'))
"
done; done
ITERA_PREFILL_ATTENTION_WS=1 timeout 200 $B/itera_device_tests --gtest_filter='llm*:*prefill*:*attention*:-*timing*' > $OUT/tests_ws1.log 2>&1; echo "tests ws=1 rc=$?"; tail -1 $OUT/tests_ws1.log; grep -E "^\[  FAILED|Failure" $OUT/tests_ws1.log | head -12
for w in fp8_e4m3 bf16; do
  ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=$w ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/trace_$w.log 2>&1
  echo "trace $w rc=$?"; grep -E "CUDA graph" $OUT/trace_$w.log | tail -1; sed -n '/decode_step phases/,/^grid barriers/p' $OUT/trace_$w.log | head -24
done
