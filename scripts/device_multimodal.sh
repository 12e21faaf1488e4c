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
# The language model's weights in fp8 against bf16: time, and the quality figures on the same
# contexts and image tokens.
bench precision -a weights=bf16,fp8_e4m3 -a batch=8 -a loop=compute
# SigLIP so400m at 384 px (729 image tokens, its own image processor) into the same model.
bench siglip -a encoder=siglip-so400m-patch14-384 -a batch=1,8 -a loop=end_to_end
# decode=gpu: nvJPEG into device memory, preprocessed in place, against the CPU pool.
bench gpudecode -a resolution=768,2048 -a batch=8 -a loop=end_to_end -a decode=cpu,gpu
# Residency (R11): both models resident against staged around their stages, the weights from
# page-locked host memory (the 8B model) and from a file on disk (a 1B model: 2.5 GB a pass).
bench residency -a batch=8 -a loop=end_to_end -a residency=resident,staged
bench residencydisk -a model=llama-3.2-1b -a batch=8 -a loop=end_to_end -a residency=resident,staged \
  -a weights_from=disk
# What staging buys (R12): in a 4 GiB envelope, the largest batch of each residency (from a probe
# case's plan), then both batches measured under both residencies.
if [ -z "${ITERA_MM_BENCHES:-}" ] || [[ " $ITERA_MM_BENCHES " == *" envelope "* ]]; then
  "$itera" bench multimodal --no-ceilings --max-time 1 --out "$out/probe.jsonl" -a model=llama-3.2-1b -a envelope=4 \
    -a batch=1 >>"$log" 2>&1
  sizes=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j.get("type") == "case":
        m = {x["name"]: x["value"] for x in j["metrics"]}
        print("%d,%d" % (m["memory/largest_batch/resident"], m["memory/largest_batch/staged"]))' "$out/probe.jsonl")
  echo "envelope 4 GiB: largest batch resident,staged = $sizes" | tee -a "$log"
  bench envelope -a model=llama-3.2-1b -a envelope=4 -a batch="$sizes" -a residency=resident,staged
fi
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
def host(j, path):
    reps = max(1, len(j.get("samples", {}).get("device_ns", [])) or 1)
    for s in j.get("stages", []):
        if s["path"] == path:
            return s["host_ns"] / reps * 1e-6
    return None
print("| encoder | model | weights | loop | decode | residency | env GiB | res | images | batch | status | images/s | ttft ms | read | decode | preprocess | load enc | vision | unload enc | load lm | context | prefill | decode steps | unload lm | plan GiB | peak GiB | max batch res/staged | quality (logits err, top-1) | cold total ms | warm total ms |")
print("| --- | --- | --- | --- | --- | --- | --: | --: | --: | --: | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --- | --- | --: | --: |")
for j in rows:
    a = j["axes"]
    m = {x["name"]: x["value"] for x in j.get("metrics", [])}
    f = lambda v, s=1.0, p="{:.2f}": "-" if v is None else p.format(v * s)
    res = a.get("residency", "resident") + ("/" + a.get("weights_from", "pinned") if a.get("residency") == "staged" else "")
    gib = lambda k: f(m.get(k), 1 / 2**30)
    fits = f"{f(m.get('memory/largest_batch/resident'), 1, '{:.0f}')}/{f(m.get('memory/largest_batch/staged'), 1, '{:.0f}')}"
    q = "-" if m.get("quality/top1_agreement") is None else f"{m['quality/logits_rel_error']:.3f}, {m['quality/top1_agreement']:.2f}"
    print(f"| {a['encoder']} | {a['model']} | {a.get('weights', 'bf16')} | {a['loop']} | {a.get('decode', 'cpu')} | {res} | {a.get('envelope', 0)} | {a['resolution']} | {a['images']} | {a['batch']} | {j['status']} | "
          f"{f(m.get('throughput/images_per_s'), 1, '{:.1f}')} | {f(m.get('latency/ttft'), 1e3)} | "
          + " | ".join(f(host(j, s) if s.startswith(("load", "unload")) else stage(j, s)) for s in
                       ("read", "decode", "preprocess", "load_encoder", "vision", "unload_encoder", "load_language_model",
                        "context", "generation/prefill", "generation/decode", "unload_language_model"))
          + f" | {gib('memory/plan/total')} | {gib('memory/measured_peak')} | {fits} | {q}"
          + f" | {f(m.get('latency/cold/total'), 1e3)} | {f(m.get('latency/warm/total'), 1e3)} |")
    if j["status"] != "ok":
        print(f"|   {j.get('message', '')[:240]} |")
print("(stage columns: ms per repetition, device time where the stage ran device work, else host)")
PY
