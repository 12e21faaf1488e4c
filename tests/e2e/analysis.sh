#!/usr/bin/env bash
# End-to-end: itera fit and itera project on the measured H200 results in docs/perf/data, and their
# errors on bad input. Usage: analysis.sh ITERA_BINARY SOURCE_DIR
set -uo pipefail
itera=$1
src=$2/..
data=$src/docs/perf/data
d4=$data/2026-11-29-llm-scenarios-4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect() {
  local want=$1 what=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  [ "$got" -eq "$want" ] || fail "$what: exit $got, expected $want; stderr: $(head -c 400 "$tmp/err")"
}
contains() { grep -q -- "$2" "$1" || fail "$3: '$2' not in $(basename "$1"): $(head -c 400 "$1")"; }

# fit: a batch sweep at one context plus a longer context
expect 0 "fit md" -- "$itera" fit "$d4/offline.jsonl" "$d4/prefill.jsonl"
contains "$tmp/out" "leave-one-out: 3 of 4 combinations tested" "fit md"
contains "$tmp/out" "| 141 GB |" "fit md"
contains "$tmp/out" "largest batch at context 640" "fit md"
expect 0 "fit json" -- "$itera" fit "$d4/offline.jsonl" "$d4/prefill.jsonl" --format json --card l40s-48gb
python3 - "$tmp/out" <<'PY' || fail "fit json content"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["schema"] == "itera.fit/1"
g = [g for g in j["groups"] if g["fitted"]][0]
assert g["leave_one_out"]["tested"] == 3
assert [c["memory_gb"] for c in g["cards"]] == [48]
assert g["plan_max_rel_error"] == 0
PY
# fit: bad input
expect 5 "fit one context" -- "$itera" fit "$d4/offline.jsonl"
contains "$tmp/err" "every point has context 640" "fit one context"
expect 5 "fit too few" -- "$itera" fit "$d4/server.jsonl"
contains "$tmp/err" "at least 3 needed" "fit too few"
expect 5 "fit no llm cases" -- "$itera" fit "$data/2026-11-29-h200-run.jsonl"
contains "$tmp/err" "memory/measured_peak" "fit no llm cases"
expect 2 "fit unknown card" -- "$itera" fit "$d4/offline.jsonl" "$d4/prefill.jsonl" --card nope
contains "$tmp/err" "card 'nope' is not in the catalogue" "fit unknown card"
sed 's/"cuda_runtime":"[^"]*"/"cuda_runtime":"9.9"/' "$d4/prefill.jsonl" >"$tmp/other.jsonl"
grep -q '"cuda_runtime":"9.9"' "$tmp/other.jsonl" || fail "fixture: no cuda_runtime field to change"
expect 5 "fit across recipes" -- "$itera" fit "$d4/offline.jsonl" "$tmp/other.jsonl"
contains "$tmp/err" "do not share a recipe" "fit across recipes"
printf 'not json\n' >"$tmp/bad.jsonl"
expect 5 "fit not a result" -- "$itera" fit "$tmp/bad.jsonl"

# project
expect 0 "project md" -- "$itera" project "$d4/offline.jsonl" --card l40s-48gb --card h200-sxm-141gb
contains "$tmp/out" "projected (validation)" "project md"
contains "$tmp/out" "| h200-sxm-141gb | measured" "project md"
contains "$tmp/out" "| l40s-48gb      | projected" "project md"
expect 0 "project json" -- "$itera" project "$d4/fp8.jsonl" --format json
python3 - "$tmp/out" <<'PY' || fail "project json content"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["schema"] == "itera.projection/1" and j["source_card"] == "h200-sxm-141gb"
for c in j["cases"]:
    assert len(c["cards"]) == 13
    assert all(card["projected"] for card in c["cards"])
    assert -0.3 < c["validation_total_error"] < 0
PY
expect 5 "project without stages" -- "$itera" project "$data/2026-11-29-h200-run.jsonl"
contains "$tmp/err" "no case can be projected" "project without stages"
expect 2 "project unknown card" -- "$itera" project "$d4/offline.jsonl" --card nope
expect 2 "project unknown source card" -- "$itera" project "$d4/offline.jsonl" --source-card nope

# project --validate-against: the H200 limited to 72 SMs (ITERA_CUDA_SM_LIMIT=66), projected onto the
# full H200 and compared with its measurement (docs/perf/2026-11-29-projection-check.md)
pc=$data/2026-11-29-projection-check
expect 0 "validate md" -- "$itera" project "$pc/limited-66.jsonl" --validate-against "$pc/full.jsonl"
contains "$tmp/out" "72 of 132 SMs: ITERA_CUDA_SM_LIMIT" "validate md"
contains "$tmp/out" "cases in both: 3; mean |error|" "validate md"
contains "$tmp/out" "| gemm.bf16 " "validate md"
expect 0 "validate json" -- "$itera" project "$pc/limited-33.jsonl" --validate-against "$pc/full.jsonl" --format json
python3 - "$tmp/out" <<'PY' || fail "validate json content"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["schema"] == "itera.projection_check/1" and j["target"]["card"] == "h200-sxm-141gb"
assert len(j["cases"]) == 3 and j["unmatched"] == []
for c in j["cases"]:
    assert abs(c["projected_ns"] / c["measured_ns"] - 1 - c["error"]) < 1e-9
    assert {s["path"] for s in c["stages"]} == {"prefill", "decode"}
assert j["mean_abs_error_at_ceilings"] < j["mean_abs_error"]
PY
expect 2 "validate with --card" -- "$itera" project "$pc/limited-66.jsonl" --validate-against "$pc/full.jsonl" --card l4-24gb
expect 5 "validate nothing in common" -- "$itera" project "$d4/prefill.jsonl" --validate-against "$pc/full.jsonl"
contains "$tmp/err" "no case was measured in both" "validate nothing in common"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "analysis e2e: all passed"
