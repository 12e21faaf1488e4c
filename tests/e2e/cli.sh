#!/usr/bin/env bash
# End-to-end: the itera binary on the cpu backend. Commands, files, exit codes and error messages.
# Usage: cli.sh ITERA_BINARY SOURCE_DIR
set -uo pipefail
itera=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
tiny=(--backend cpu --quiet --warmup 1 --warmup-time 0 --min-samples 3 --min-time 0 --max-time 0.2)

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# expect CODE DESCRIPTION -- COMMAND...: runs it, checks the exit code, keeps stdout/stderr.
expect() {
  local want=$1 what=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  [ "$got" -eq "$want" ] || fail "$what: exit $got, expected $want; stderr: $(head -c 400 "$tmp/err")"
}
contains() { grep -q -- "$2" "$1" || fail "$3: '$2' not in $(basename "$1"): $(head -c 400 "$1")"; }
json_ok() { python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1]) if l.strip()]' "$1" || fail "$2: not JSON"; }

# list and env
expect 0 "list" -- "$itera" list
contains "$tmp/out" "## gemm" "list"; contains "$tmp/out" "transfer" "list"; contains "$tmp/out" "| cpu | yes | yes" "list"
expect 0 "list json" -- "$itera" list --format json
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert {w["name"] for w in j["workloads"]} >= {"gemm","transfer"}' "$tmp/out" || fail "list json"
expect 0 "env json" -- "$itera" env --format json
python3 - "$tmp/out" <<'PY' || fail "env json content"
import json, sys
env = json.load(open(sys.argv[1]))
assert env["host"], "host reported"
assert "gpu" in env and "formats" in env
for row in env["formats"]:
    assert row["runs"] in (None, True, False)
    if row["runs"]: assert "error" in row, "runs=true only with a measured error"
PY
expect 0 "env md" -- "$itera" env
[ -s "$tmp/out" ] || fail "env md empty"
grep -q '"' "$tmp/err" && grep -q '{' "$tmp/err" && fail "env wrote JSON to stderr"

# bench: results on stdout and in the file, progress and logs never on stdout
expect 0 "bench gemm" -- "$itera" bench gemm "${tiny[@]}" --axis M=32,64 --axis N=16 --axis K=8-32*2 --axis format=fp32 --out "$tmp/gemm.jsonl" --format csv
json_ok "$tmp/gemm.jsonl" "bench jsonl"
[ "$(grep -c '"type":"case"' "$tmp/gemm.jsonl")" -ge 6 ] || fail "bench wrote fewer than 6 cases (+ceilings)"
head -1 "$tmp/out" | grep -q "workload" || fail "csv header"
grep -q "itera:" "$tmp/out" && fail "log line on stdout"
expect 0 "bench transfer" -- "$itera" bench transfer "${tiny[@]}" --axis bytes=64Ki --no-ceilings --out "$tmp/transfer.jsonl"
contains "$tmp/out" "transfer" "bench transfer md"

# bad usage: exit 2 and a message that names the problem
expect 2 "unknown workload" -- "$itera" bench nope "${tiny[@]}"
contains "$tmp/err" "unknown workload 'nope'" "unknown workload"
expect 2 "unknown axis" -- "$itera" bench gemm "${tiny[@]}" --axis Q=1
contains "$tmp/err" "no axis 'Q'" "unknown axis"
expect 2 "bad format" -- "$itera" bench gemm "${tiny[@]}" --axis format=fp64
contains "$tmp/err" "unknown value 'fp64'" "bad format"
expect 2 "malformed value" -- "$itera" bench gemm "${tiny[@]}" --axis M=12x
contains "$tmp/err" "axis M" "malformed value"
expect 2 "axis without =" -- "$itera" bench gemm "${tiny[@]}" --axis M
expect 2 "d2d from pageable" -- "$itera" bench transfer "${tiny[@]}" --axis direction=d2d --axis memory=pageable
contains "$tmp/err" "memory=device" "d2d from pageable"
expect 2 "too many cases" -- "$itera" bench gemm "${tiny[@]}" --axis M=1-4096 --axis N=1-4096
contains "$tmp/err" "more than" "too many cases"
expect 2 "contradictory stopping rule" -- "$itera" bench gemm "${tiny[@]}" --min-samples 50 --max-samples 10
contains "$tmp/err" "min-samples" "contradictory stopping rule"
expect 2 "bench never overwrites results" -- "$itera" bench gemm "${tiny[@]}" --axis M=8 --out "$tmp/gemm.jsonl"
contains "$tmp/err" "already exists" "bench never overwrites results"
expect 2 "bench --out -" -- "$itera" bench gemm "${tiny[@]}" --axis M=8 --out -
expect 2 "unknown backend" -- "$itera" bench gemm --backend tpu
expect 2 "no subcommand" -- "$itera"

# a case that cannot run here is recorded and the run goes on
expect 0 "skipped format" -- "$itera" bench gemm "${tiny[@]}" --axis M=16 --axis N=16 --axis K=16 --axis format=fp8_e4m3,fp32 --no-ceilings --out "$tmp/skip.jsonl"
grep -q '"status":"skipped"' "$tmp/skip.jsonl" || fail "skipped case not recorded"
grep -q '"status":"ok"' "$tmp/skip.jsonl" || fail "the run did not go on after the skip"

# report: re-render; bad files exit 5 with the file named
expect 0 "report md" -- "$itera" report "$tmp/gemm.jsonl" "$tmp/transfer.jsonl"
contains "$tmp/out" "gemm" "report md"
expect 0 "report json" -- "$itera" report "$tmp/gemm.jsonl" --format json
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/out" || fail "report json"
echo '{"hello": 1}' > "$tmp/foreign.jsonl"
expect 5 "foreign file" -- "$itera" report "$tmp/foreign.jsonl"
contains "$tmp/err" "foreign.jsonl" "foreign file"
expect 5 "missing file" -- "$itera" report "$tmp/none.jsonl"
: > "$tmp/empty.jsonl"
expect 5 "empty file" -- "$itera" report "$tmp/empty.jsonl"
# a kill can land anywhere in the last line, also right after a nested object's closing brace
python3 - "$tmp/gemm.jsonl" "$tmp/cut.jsonl" <<'PY'
import sys
data = open(sys.argv[1]).read()
last = data.rstrip("\n").rfind("\n") + 1
open(sys.argv[2], "w").write(data[:data.index("}", last) + 1])
PY
expect 0 "truncated file keeps finished cases" -- "$itera" report "$tmp/cut.jsonl"
contains "$tmp/err" "cut-short" "truncated file"

# compare: same recipe compares; a changed recipe field refuses (3) unless allowed
expect 0 "compare same" -- "$itera" compare "$tmp/gemm.jsonl" "$tmp/gemm.jsonl"
sed 's/"precision.output":"fp32"/"precision.output":"fp16"/' "$tmp/gemm.jsonl" > "$tmp/gemm_fp16.jsonl"
expect 3 "compare refused" -- "$itera" compare "$tmp/gemm.jsonl" "$tmp/gemm_fp16.jsonl"
contains "$tmp/out" "precision.output" "compare refused lists the field"
expect 0 "compare allowed" -- "$itera" compare "$tmp/gemm.jsonl" "$tmp/gemm_fp16.jsonl" --allow 'case*'
expect 3 "compare of other shapes refused" -- "$itera" compare "$tmp/gemm.jsonl" "$tmp/transfer.jsonl"
contains "$tmp/out" "cases" "compare of other shapes lists the case set"
expect 0 "compare of other shapes allowed" -- "$itera" compare "$tmp/gemm.jsonl" "$tmp/transfer.jsonl" --allow cases
expect 5 "report a folder" -- "$itera" report "$tmp"
contains "$tmp/err" "is a folder" "report a folder"

# run: the default suite into a folder; refuses to overwrite
expect 0 "run" -- "$itera" run "${tiny[@]}" --out "$tmp/run"
for f in results.jsonl summary.md env.json; do [ -s "$tmp/run/$f" ] || fail "run did not write $f"; done
json_ok "$tmp/run/results.jsonl" "run results"
grep -q '"type":"ceiling"' "$tmp/run/results.jsonl" || fail "run measured no ceiling"
expect 2 "run refuses to overwrite" -- "$itera" run "${tiny[@]}" --out "$tmp/run"

if [ "$failures" -gt 0 ]; then echo "$failures e2e checks failed" >&2; exit 1; fi
echo "e2e: all checks passed"
