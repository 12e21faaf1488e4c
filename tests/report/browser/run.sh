#!/usr/bin/env bash
# Browser test of the HTML report: renders real measured results (docs/perf/data) with
# `itera report --format html`, installs playwright-core from package-lock.json under WORK_DIR
# (npm ci --ignore-scripts, never a browser download) and opens each page from disk in Debian's
# chromium: no console error, no request, every chart drawn with its data, a screenshot of each.
# Exit 77 (skipped) when chromium is absent.
# Usage: run.sh ITERA SOURCE_DIR WORK_DIR   (screenshots: WORK_DIR/screenshots)
set -euo pipefail
itera=$1 src=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x /usr/bin/chromium ]; then
  echo "SKIP: /usr/bin/chromium is absent (Debian package chromium; scripts/common.sh installs it)" >&2
  exit 77
fi
command -v npm >/dev/null || { echo "report browser test: npm is missing (Debian package npm)" >&2; exit 1; }
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/check_report.mjs" "$work/"
if ! cmp -s "$here/package-lock.json" "$work/node_modules/.itera-lock" 2>/dev/null; then
  (cd "$work" && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)
  cp "$here/package-lock.json" "$work/node_modules/.itera-lock"
fi
tmp=$(mktemp -d /tmp/itera-report-browser.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$work/screenshots" && mkdir -p "$work/screenshots"
data=$src/docs/perf/data
scen=$data/2026-11-29-llm-scenarios-4

# Every chart with data: five runs, the llm scenarios and the H200 ceilings and suite.
"$itera" report "$scen/offline.jsonl" "$scen/fp8.jsonl" "$scen/prefill.jsonl" "$scen/server.jsonl" \
  "$data/2026-11-29-h200-run.jsonl" --format html --out "$work/all.html"
# One run of the server scenario: latency and memory drawn, the others say there is no data.
"$itera" report "$scen/server.jsonl" --format html --out "$work/server.html"
# One run of bf16 and fp8 weights on the H200: the precision chart (fp8's speed-up over bf16).
"$itera" report "$data/2026-11-30-decode-step-4/run8_bench.jsonl" --format html --out "$work/precision.html"

cd "$work"
node check_report.mjs all.html screenshots/all.png "$tmp" throughput-llm latency-llm-ttft latency-llm-tpot \
  stages-llm memory-llm utilisation-llm utilisation-transfer utilisation-gemm comparison-llm
node check_report.mjs server.html screenshots/server.png "$tmp" throughput latency-llm-ttft latency-llm-tpot \
  stages memory-llm precision utilisation comparison
node check_report.mjs precision.html screenshots/precision.png "$tmp" +precision-llm-1 +throughput-llm +memory-llm
