#!/usr/bin/env bash
# session 10, run 8: c84cc4d: the device tests (all but timing), the bench at batch 1 (bf16, fp8), the timing test at batch 1 and 64
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv | tee -a $L
timeout 200 $B/itera_device_tests --gtest_filter='-*timing*' >$OUT/device_tests.log 2>&1
echo "device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/device_tests.log | head -10
timeout 200 $B/itera bench llm --max-time 15 --axis batch=1 --axis weights=bf16,fp8_e4m3 --out $OUT/bench.jsonl >$OUT/bench.log 2>&1
echo "bench rc $?"; grep -E "copy.d2d" $OUT/bench.log | head -1
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get('workload') != 'llm': continue
    m = {x['name']: x['value'] for x in r['metrics']}
    print(r['axes']['weights'], 'tpot %.4f ms' % (m['latency/tpot'] * 1e3), 'tok/s %.1f' % m['throughput/decode_tokens_per_s'],
          'GB/s %.0f' % (m['throughput/decode_bytes'] / 1e9), 'of copy %.3f' % m['utilisation/decode/copy.d2d'],
          'logits err %s top1 %s' % (m.get('quality/logits_rel_error'), m.get('quality/top1_agreement')))
PY
t() { echo "=== $1 $2" >>$L; ITERA_LLM_TIMING_WEIGHTS=$1 ITERA_LLM_TIMING_BATCH=$2 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; cat $OUT/t.log >>$L
  grep -E 'CUDA graph' $OUT/t.log | tail -1; }
t fp8_e4m3 1; t bf16 1; t bf16 64
rm -f $OUT/t.log
