#!/usr/bin/env bash
# the session's last code: every device test, ViT-L/14 b128 with the ceilings, llm fp8 (tensor-core products on/off) and bf16 at batch 1
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
N=$PWD/bb/bin/itera_device_tests; I=$PWD/bb/bin/itera
timeout 300 $N >$OUT/device_tests.log 2>&1
echo "device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/device_tests.log | head -20
timeout 200 $I bench vision_encoder --max-time 6 --axis preset=clip-vit-large-patch14 --axis batch=128 --out $OUT/vit_last.jsonl >$OUT/vit_last.md 2>&1; echo "vit rc $?"
t() { timeout 120 $N --gtest_filter='*decode_timing_llama*' >$OUT/timing_$1.log 2>&1; echo "$1: $(grep -E 'CUDA graph' $OUT/timing_$1.log | sed 's/.*context ~[0-9]*, //')"; }
ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_FP8_MMA_GEMV=1 t fp8_mma
ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_FP8_MMA_GEMV=0 t fp8_cc
t bf16
L() { timeout 200 $I bench llm --axis batch=1 --axis weights=$2 --out $OUT/llm_$1.jsonl >$OUT/llm_$1.md 2>&1; echo "llm $1 rc $?"; }
ITERA_LLM_FP8_MMA_GEMV=1 L fp8_mma fp8_e4m3
ITERA_LLM_FP8_MMA_GEMV=0 L fp8_cc fp8_e4m3
L bf16 bf16
python3 - <<'PY'
import json, os, glob
O=os.environ['OUT']
for f in sorted(glob.glob(O+'/llm_*.jsonl'))+[O+'/vit_last.jsonl']:
  for line in open(f):
    d=json.loads(line)
    if d.get('type')!='case': continue
    m={x['name']:x['value'] for x in d.get('metrics',[])}
    keys=[k for k in m if any(s in k for s in ('tpot','tokens_per_s','quality','images_per_s','encoder_gemm/gemm','bandwidth','top1','logits'))]
    print(os.path.basename(f), d.get('status'), " ".join(f"{k}={m[k]:.4g}" for k in keys)[:900])
PY
