#!/usr/bin/env bash
# The llm workload on the GPU machine: engine tests against the cpu reference, then the offline
# sweep (both loops), the 2048-token prefill, the server and single-stream scenarios. Built
# elsewhere and carried as a bundle (scripts/device_session.sh says how):
#   (device) bash scripts/device_llm.sh bundle "$OUT" [extra bench args...]
set -uo pipefail
bundle=$1 out=$2
shift 2
export LD_LIBRARY_PATH=$PWD/$bundle/lib:/usr/local/cuda/lib64
bin=$PWD/$bundle/bin
log=$out/llm.log
section() { printf '\n===== %s =====\n' "$*" | tee -a "$log"; }

section device tests
"$bin/itera_device_tests" --gtest_filter='llm*:-*timing*' >>"$log" 2>&1; echo "device tests exit $?" | tee -a "$log"
for run in "1 bf16" "64 bf16" "1 fp8_e4m3"; do
  read -r batch weights <<<"$run"
  section "decode stage table: batch $batch, $weights weights"
  ITERA_LLM_TIMING_BATCH=$batch ITERA_LLM_TIMING_WEIGHTS=$weights "$bin/itera_device_tests" \
    --gtest_filter='*decode_timing*' 2>&1 | grep -E "ms/step|stage|^  " >>"$log"
done
grep -E "agree|decode|ms/step|OK|FAILED" "$log" | tail -20
bench() {
  local name=$1
  shift
  section "bench $name"
  "$bin/itera" bench llm --out "$out/$name.jsonl" "$@" >"$out/$name.md" 2>>"$log"
  echo "exit $?" | tee -a "$log"
}
bench offline --max-time 4 --axis batch=1,8,64 --axis loop=compute,end_to_end "$@"
bench fp8 --max-time 4 --axis weights=fp8_e4m3 --axis batch=1,8,64 "$@"
bench prefill --max-time 4 --axis prompt=2048 --axis output=1 "$@"
bench server --no-ceilings --axis scenario=server --axis batch=64 --axis rate=4,16 --axis requests=128 \
  --axis ttft_ms=1000 --axis tpot_ms=50 "$@"
bench single --no-ceilings --axis scenario=single_stream --axis requests=16 "$@"
section summary
python3 - "$out" <<'PY' | tee -a "$log"
import json, sys, glob, os
keys = ["latency/ttft", "latency/tpot", "throughput/decode_tokens_per_s", "throughput/prefill_tokens_per_s",
        "utilisation/decode/copy.d2d", "utilisation/prefill/gemm.bf16", "memory/plan/total", "memory/measured_peak",
        "memory/device_used", "latency/ttft/p99", "latency/tpot/p99", "latency/e2e/p50", "load/goodput",
        "load/meets_targets", "throughput/output_tokens_per_s", "quality/logits_rel_error", "quality/top1_agreement"]
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
    for line in open(f):
        j = json.loads(line)
        if j.get("kind") != "case" and "axes" not in j: continue
        if j.get("workload") != "llm": continue
        a = j["axes"]
        m = {x["name"]: x["value"] for x in j.get("metrics", [])}
        head = f'{a["scenario"]:>13} {a["loop"]:>10} {a["weights"]:>8} b={a["batch"]:>3} p={a["prompt"]} o={a["output"]} r={a["rate"]}'
        print(head, j["status"], j.get("message", "")[:120])
        print("     " + "  ".join(f"{k.split('/',1)[1]}={m[k]:.4g}" for k in keys if k in m))
PY
