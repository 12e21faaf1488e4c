#!/usr/bin/env bash
# session 10, run 9: attention items waiting for their kv head's qkv tiles instead of a grid barrier (ITERA_X_HEADWAIT), the fp8 consumer loading steps in pairs without bank conflicts (ITERA_X_PAIRS): step test (both on), A/B of the four settings (3 rounds), then the device tests and the bench with the best setting
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv | tee -a $L
timeout 100 $B/itera_device_tests --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; rc=$?; echo "step test (both on) rc $rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
t() { echo "=== HEADWAIT=$1 PAIRS=$2 $3" >>$L; ITERA_X_HEADWAIT=$1 ITERA_X_PAIRS=$2 ITERA_LLM_TIMING_WEIGHTS=$3 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; cat $OUT/t.log >>$L
  grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*CUDA graph: \([0-9.]*\) ms.*/\1/'; }
declare -A S
for v in 00 10 01 11; do S[$v]=0; done
for r in 1 2 3; do for w in fp8_e4m3 bf16; do
  line="$w"; for v in 00 10 01 11; do x=$(t ${v:0:1} ${v:1:1} $w); line="$line h${v:0:1}p${v:1:1} $x"; S[$v]=$(python3 -c "print(${S[$v]}+${x:-99})"); done; echo "$line"
done; done
best=00; for v in 10 01 11; do if python3 -c "import sys; sys.exit(0 if ${S[$v]} < ${S[$best]} else 1)"; then best=$v; fi; done
[ $rc -eq 0 ] || best=00
echo "sums: 00 ${S[00]} 10 ${S[10]} 01 ${S[01]} 11 ${S[11]}; best $best"
export ITERA_X_HEADWAIT=${best:0:1} ITERA_X_PAIRS=${best:1:1}
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1
sed -n '/decode_step phases/,/own split/p' $OUT/t.log | tee -a $L | head -16
timeout 200 $B/itera_device_tests --gtest_filter='-*timing*' >$OUT/device_tests.log 2>&1
echo "device tests ($best) rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/device_tests.log | head -10
timeout 200 $B/itera bench llm --max-time 15 --axis batch=1 --axis weights=bf16,fp8_e4m3 --out $OUT/bench.jsonl >$OUT/bench.log 2>&1
echo "bench ($best) rc $?"; grep -E "copy.d2d" $OUT/bench.log | head -1
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
rm -f $OUT/t.log
