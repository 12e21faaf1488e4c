#!/usr/bin/env bash
# The vision encoder's fused fc1 (src/kernels/vit_gemm.cu) on the GPU machine, A/B against
# cuBLASLt and the activation pass in one run (docs/perf/2026-11-30-own-gemms.md): ViT-L/14 at 224,
# batch 128, `itera bench vision_encoder` with ITERA_VIT_FUSED_FC1=1 then 0; prints images/s (encode
# + project, and the encoder alone), the error against the cpu reference, the clock range and the
# per-layer stage table of each.
#   (device) bash scripts/device_fc1_ab.sh BUNDLE   (BUNDLE from ../shared/tools/device-bundle with
#   the itera binary; the results under $OUT)
set -uo pipefail
bundle=${1:?usage: device_fc1_ab.sh BUNDLE}
export LD_LIBRARY_PATH=$PWD/$bundle/lib:/usr/local/cuda/lib64
mkdir -p "$OUT"
for fused in 1 0; do
  ITERA_VIT_FUSED_FC1=$fused "$PWD/$bundle/bin/itera" bench vision_encoder --max-time 4 \
    --axis preset=clip-vit-large-patch14 --axis batch=128 --out "$OUT/vit_b128_fused$fused.jsonl" \
    >"$OUT/vit_b128_fused$fused.md" 2>&1
  echo "fused=$fused rc $?"
done
python3 - <<'PY'
import json, os
for fused in (1, 0):
    for line in open(os.path.join(os.environ['OUT'], f'vit_b128_fused{fused}.jsonl')):
        d = json.loads(line)
        if d.get('type') != 'case' or d.get('workload') != 'vision_encoder':
            continue
        m = {x['name']: x['value'] for x in d['metrics']}
        t = d['throttle']
        print(f"fused={fused}: {m['throughput/images_per_s']:.0f} images/s, encoder {m['throughput/encoder_images_per_s']:.0f}, "
              f"error {d['verification']['error']:.4f}, clocks {t.get('sm_clock_mhz_min')}-{t.get('sm_clock_mhz_max')} MHz")
        for s in d.get('stages') or []:
            if s['depth'] <= 1 and s.get('calls'):
                ms = s['device_ns'] / s['calls'] / 1e6
                tf = s['flops'] / s['device_ns'] / 1e3 if s['device_ns'] else 0
                print(f"    {s['path']:<28} {ms:8.3f} ms {tf:7.1f} TFLOP/s")
PY
