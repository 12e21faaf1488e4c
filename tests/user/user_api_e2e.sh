#!/usr/bin/env bash
# End-to-end: results written through the user API (the C example through libitera.so, the C++
# example's runner scenarios, the C API test's failed cases) are read by `itera report` in every
# format and by `itera compare`, unchanged; a failing callback leaves its case written and the run
# going on; nothing of the process but the labels it passed reaches the results (R18).
# Usage: user_api_e2e.sh ITERA EXAMPLE_C EXAMPLE_CPP C_API_TEST
set -uo pipefail
itera=$1 example_c=$2 example_cpp=$3 c_api_test=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect() {
  local want=$1 what=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  [ "$got" -eq "$want" ] || fail "$what: exit $got, expected $want; stderr: $(head -c 600 "$tmp/err")"
}
contains() { grep -q -- "$2" "$1" || fail "$3: '$2' not in $(basename "$1"): $(head -c 600 "$1")"; }

# The results files. The names carry words that must not leak into the results (R18).
secret=customer-secret-prompts
expect 0 "C example" -- "$example_c" "$tmp/$secret-c.jsonl" 20
expect 0 "C++ example A" -- "$example_cpp" "$tmp/a.jsonl" --requests 40
expect 0 "C++ example B" -- "$example_cpp" "$tmp/b.jsonl" --requests 40
expect 0 "C++ example, other precision" -- "$example_cpp" "$tmp/c.jsonl" --requests 40 --field precision.weights=bf16
expect 4 "C++ example with a failing request" -- "$example_cpp" "$tmp/fail.jsonl" --requests 40 --fail-request 5
contains "$tmp/err" "the model ran out of memory (simulated by --fail-request)" "failing request"
expect 0 "C API test" -- "$c_api_test" "$tmp/capi"
expect 2 "C++ example refuses an existing file" -- "$example_cpp" "$tmp/a.jsonl"
contains "$tmp/err" "already exists" "existing file"

for f in "$tmp"/*.jsonl "$tmp/capi/c_api.jsonl"; do
  grep -q "$secret" "$f" && fail "R18: $(basename "$f") holds the results file's name"
  grep -q "$tmp" "$f" && fail "R18: $(basename "$f") holds a path of this run"
  grep -q '"command":"' "$f" || fail "$(basename "$f"): no context command"
done
grep -q '"command":"c api test"' "$tmp/capi/c_api.jsonl" || fail "the C API's label is not the context's command"

# itera report: markdown, CSV, JSON of every file at once.
all=("$tmp/$secret-c.jsonl" "$tmp/a.jsonl" "$tmp/fail.jsonl" "$tmp/capi/c_api.jsonl")
expect 0 "report md" -- "$itera" report "${all[@]}"
md=$tmp/report.md
cp "$tmp/out" "$md"
contains "$md" "### c-pipeline (version 1)" "report md"
contains "$md" "### toy-lm-server (version 1)" "report md"
contains "$md" "### c-api (version 1)" "report md"
contains "$md" "Stages:" "report md"
contains "$md" "prefill" "report md"
contains "$md" "decode" "report md"
contains "$md" "throughput/items_per_s" "report md"
contains "$md" "Operating points (load scenarios against their latency targets)" "report md"
contains "$md" "stage 'step' was never exited" "report md (C API's failed case)"
contains "$md" "the callback returned 3" "report md (C API's callback failure)"
contains "$md" "the model ran out of memory" "report md (C++ failing request)"
expect 0 "report csv" -- "$itera" report "${all[@]}" --format csv
contains "$tmp/out" "metric.throughput/output_tokens_per_s" "report csv"
expect 0 "report json" -- "$itera" report "${all[@]}" --format json
python3 - "$tmp/out" <<'PY' || fail "report json content"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["schema"] == "itera.report/1"
sets = {s["source"].rsplit("/", 1)[-1]: s for s in doc["results"]}
c = next(v for k, v in sets.items() if k.endswith("-c.jsonl"))
assert c["context"]["backend"] == "cpu", c["context"]["backend"]
own = [x for x in c["cases"] if x["axes"]["scenario"] == "own_loop"]
assert [x["axes"]["side"] for x in own] == ["128", "256"]
for x in own:
    assert x["status"] == "ok", x["message"]
    assert len(x["samples"]["host_ns"]) == 20 and x["warmup"]["count"] == 3
    assert [s["path"] for s in x["stages"]] == ["decode", "halve", "infer"], x["stages"]
    assert all(s["calls"] == 20 and s["device_ns"] == -1 for s in x["stages"])
    m = {k["name"]: k["value"] for k in x["metrics"]}
    assert m["count/images"] == 20 and m["memory/measured_peak"] > 0, m
offline = [x for x in c["cases"] if x["axes"].get("scenario") == "offline"]
assert [x["axes"]["batch"] for x in offline] == ["1", "4"] and all(x["status"] == "ok" for x in offline)
assert all(x["stop_reason"] in ("converged", "max_time", "max_samples") for x in offline)
a = sets["a.jsonl"]
kinds = [x["axes"]["scenario"] for x in a["cases"]]
assert kinds == ["offline"] * 2 + ["server"] * 4 + ["single_stream"], kinds
for x in a["cases"]:
    assert x["status"] == "ok", x["message"]
    m = {k["name"]: k["value"] for k in x["metrics"]}
    assert m["throughput/output_tokens_per_s"] > 0
    if x["axes"]["scenario"] != "offline":
        assert x["device_time_method"].startswith("host_steady_clock"), x["device_time_method"]
        assert m["latency/ttft/p99"] > 0 and "load/goodput" in m
        assert ("load/meets_targets" in m) == (x["axes"]["scenario"] == "server")
        assert {s["path"] for s in x["stages"]} == {"prefill", "decode"}
f = sets["fail.jsonl"]
failed = [x for x in f["cases"] if x["status"] == "failed"]
assert len(failed) == 1 and "request 5" in failed[0]["message"], [x["message"] for x in failed]
assert len(failed[0]["samples"]["host_ns"]) == 5 and failed[0]["stats"] == {}
assert len(f["cases"]) == 7 and f["cases"][-1]["status"] == "ok"  # the run went on
capi = sets["c_api.jsonl"]
st = [x["status"] for x in capi["cases"]]
assert st == ["ok", "failed", "failed", "failed", "ok", "ok"], st
PY

# itera compare: two runs of one recipe compare case by case; another precision is refused.
expect 0 "compare A B" -- "$itera" compare "$tmp/a.jsonl" "$tmp/b.jsonl"
contains "$tmp/out" "None: both runs share the recipe." "compare A B"
contains "$tmp/out" "## Cases" "compare A B"
contains "$tmp/out" "toy-lm-server" "compare A B"
expect 0 "compare A B json" -- "$itera" compare "$tmp/a.jsonl" "$tmp/b.jsonl" --format json
python3 - "$tmp/out" <<'PY' || fail "compare json content"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["refused"] is False, doc["message"]
assert len(doc["cases"]) == 7, len(doc["cases"])
assert all(c["verdict"] in ("same", "faster", "slower") for c in doc["cases"]), doc["cases"]
PY
expect 3 "compare other precision" -- "$itera" compare "$tmp/a.jsonl" "$tmp/c.jsonl"
contains "$tmp/out" "precision.weights" "compare refused"
expect 0 "compare other precision allowed" -- "$itera" compare "$tmp/a.jsonl" "$tmp/c.jsonl" --allow 'case[*'
expect 0 "compare with a failed case" -- "$itera" compare "$tmp/a.jsonl" "$tmp/fail.jsonl"
contains "$tmp/out" "A ok, B failed" "compare with a failed case"

# itera cost and itera plan price a card's run: they need a catalogue card in the context, which a
# host run lacks. The same results with an H200's fingerprint put in (nothing else changed) show
# that they read the API's figures (throughput/output_tokens_per_s, the server's operating point).
python3 - "$tmp/a.jsonl" "$tmp/a-h200.jsonl" <<'PY' || fail "fixture: H200 context"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
ctx = json.loads(lines[0])
ctx["backend"] = "cuda"
ctx["device"] = {"kind": "cuda", "name": "NVIDIA H200", "memory_total_bytes": 150754820096,
                 "variant": {"id": "h200-sxm-141gb", "name": "NVIDIA H200 SXM 141GB"}}
out = [json.dumps(ctx)]
for line in lines[1:]:
    case = json.loads(line)
    case["backend"] = "cuda"
    out.append(json.dumps(case))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
prices=$(dirname "$0")/../../data/prices.example.json
expect 0 "cost" -- "$itera" cost "$tmp/a-h200.jsonl" --prices "$prices"
contains "$tmp/out" "## toy-lm-server scenario=offline" "cost"
contains "$tmp/out" "| h200-sxm-141gb | measured  | batch=" "cost"
contains "$tmp/out" "rate=600/s batch=2\|rate=600/s batch=1\|rate=100/s batch=1\|rate=100/s batch=2\|no rate meets the latency targets" "cost (server)"
expect 0 "plan" -- "$itera" plan "$tmp/a-h200.jsonl" --prices "$prices"
contains "$tmp/out" "Recommendation: 1 x h200-sxm-141gb" "plan"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "user API end to end: OK"
