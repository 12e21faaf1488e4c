#!/usr/bin/env bash
# The multimodal pipeline on the GPU machine (issue 4, docs/multimodal.md "The pipeline"): the
# workload `multimodal` with the GPU preprocessing, the CUDA encoder and projector and the cuda llm
# engine, both loops, from generated JPEGs. Builds nothing: it runs an itera built with CUDA and
# carried as a bundle (the same one scripts/device_vit.sh runs):
#   ../shared/tools/device-bundle bundle build-fp8/itera build-fp8/tests/itera_device_tests
#   (device) bash scripts/device_multimodal.sh bundle "$OUT"
# Writes pipeline_*.jsonl and multimodal.log under OUT and prints a short table last.
set -uo pipefail
bundle=${1:?usage: device_multimodal.sh BUNDLE OUT} out=${2:?usage: device_multimodal.sh BUNDLE OUT}
export LD_LIBRARY_PATH=$PWD/$bundle/lib:/usr/local/cuda/lib64
itera=$PWD/$bundle/bin/itera
log=$out/multimodal.log
mkdir -p "$out"
[ -x "$itera" ] || { echo "missing $itera: bundle it first (see the top of this script)" >&2; exit 2; }
bench() {  # name, then axes; ITERA_MM_BENCHES="tiny gpudecode" runs only those
  local name=$1
  shift
  if [ -n "${ITERA_MM_BENCHES:-}" ] && [[ " $ITERA_MM_BENCHES " != *" $name "* ]]; then return; fi
  printf '\n===== %s: %s =====\n' "$name" "$*" >>"$log"
  "$itera" bench multimodal --no-ceilings --max-time "${ITERA_MM_MAX_TIME:-3}" --out "$out/pipeline_$name.jsonl" "$@" >>"$log" 2>&1
  echo "$name: exit $?" | tee -a "$log"
}
# The oracle's shapes on the GPU first (fast), then LLaVA-1.5-shaped: CLIP ViT-L/14 at 336 px
# (576 image tokens) into a Llama-3.1-8B-shaped model.
bench tiny -a encoder=tiny -a model=tiny -a resolution=64 -a images=1,2 -a batch=2 -a prompt=8 -a output=4 \
  -a loop=compute,end_to_end -a decode=cpu,gpu
bench llava -a batch=1,8 -a loop=compute,end_to_end
bench images -a images=1,2,4 -a batch=4 -a loop=end_to_end
bench resolution -a resolution=224,2048 -a batch=8 -a loop=end_to_end
# decode=gpu: nvJPEG into device memory, preprocessed in place, against the CPU pool.
bench gpudecode -a resolution=768,2048 -a batch=8 -a loop=end_to_end -a decode=cpu,gpu
python3 - "$out" <<'PY' | tee -a "$log"
import glob, json, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "pipeline_*.jsonl"))):
    for line in open(path):
        j = json.loads(line)
        if j.get("type") != "case" or j.get("workload") != "multimodal":
            continue
        rows.append(j)
def stage(j, path):
    reps = max(1, len(j.get("samples", {}).get("device_ns", [])) or 1)
    for s in j.get("stages", []):
        if s["path"] == path:
            t = s["device_ns"] if s.get("device_ns", -1) > 0 else s["host_ns"]
            return t / reps * 1e-6
    return None
print("| encoder | model | loop | decode | res | images | batch | status | images/s | ttft ms | read | decode | preprocess | vision | context | prefill | decode steps | cold total ms | warm total ms |")
print("| --- | --- | --- | --- | --: | --: | --: | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")
for j in rows:
    a = j["axes"]
    m = {x["name"]: x["value"] for x in j.get("metrics", [])}
    f = lambda v, s=1.0, p="{:.2f}": "-" if v is None else p.format(v * s)
    print(f"| {a['encoder']} | {a['model']} | {a['loop']} | {a.get('decode', 'cpu')} | {a['resolution']} | {a['images']} | {a['batch']} | {j['status']} | "
          f"{f(m.get('throughput/images_per_s'), 1, '{:.1f}')} | {f(m.get('latency/ttft'), 1e3)} | "
          + " | ".join(f(stage(j, s)) for s in ("read", "decode", "preprocess", "vision", "context", "generation/prefill", "generation/decode"))
          + f" | {f(m.get('latency/cold/total'), 1e3)} | {f(m.get('latency/warm/total'), 1e3)} |")
    if j["status"] != "ok":
        print(f"|   {j.get('message', '')[:240]} |")
print("(stage columns: ms per repetition, device time where the stage ran device work, else host)")
PY
