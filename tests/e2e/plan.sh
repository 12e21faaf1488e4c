#!/usr/bin/env bash
# End-to-end: itera cost and itera plan on the measured H200 llm results in docs/perf/data with the
# example price file, and their errors on bad input. Usage: plan.sh ITERA_BINARY SOURCE_DIR
set -uo pipefail
itera=$1
src=$2/..
data=$src/docs/perf/data
d4=$data/2026-11-29-llm-scenarios-4
prices=$src/data/prices.example.json
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

# cost: offline bf16 and fp8 (one recipe, different cases) and the server scenario
expect 0 "cost md" -- "$itera" cost "$d4/offline.jsonl" "$d4/fp8.jsonl" "$d4/server.jsonl" --prices "$prices"
contains "$tmp/out" "Example prices, not quotes" "cost md"
contains "$tmp/out" "| h200-sxm-141gb | measured  | batch=64" "cost md"
contains "$tmp/out" "| h200-sxm-141gb | measured | rate=16/s batch=64" "cost md"
contains "$tmp/out" "| l40s-48gb      | projected |" "cost md"
contains "$tmp/out" "server scenario: not projected" "cost md"
expect 0 "cost json" -- "$itera" cost "$d4/offline.jsonl" --prices "$prices" --format json --card h200-sxm-141gb --card l4-24gb
python3 - "$tmp/out" <<'PY' || fail "cost json content"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["schema"] == "itera.cost/1" and j["currency"] == "USD" and j["example_prices"] is True
assert len(j["groups"]) == 2
for g in j["groups"]:
    rows = {r["card"]: r for r in g["rows"]}
    assert set(rows) == {"h200-sxm-141gb", "l4-24gb"}
    m, p = rows["h200-sxm-141gb"], rows["l4-24gb"]
    assert m["basis"] == "measured" and m["configuration"] == "batch=64"
    assert abs(m["cost"] - 3.79 / (m["rate"] * 3600) * 1e6) < 1e-9
    assert p["basis"] == "projected" and p["configuration"] == "batch=8", p
    assert p["validation_error"] < 0
PY

# plan
expect 0 "plan md" -- "$itera" plan "$d4/offline.jsonl" --prices "$prices"
contains "$tmp/out" "Recommendation: 1 x" "plan md"
contains "$tmp/out" "runner-up:" "plan md"
contains "$tmp/out" "POST /api/v1/orders" "plan md"
contains "$tmp/out" '"email": "REPLACE-WITH-YOUR-EMAIL"' "plan md"
contains "$tmp/out" "profile compute against transfers and memory per stage" "plan md"
expect 0 "plan json" -- "$itera" plan "$d4/offline.jsonl" --prices "$prices" --days 30 --target-rate 20000 --max-gpus 8 --format json
python3 - "$tmp/out" <<'PY' || fail "plan json content"
import json, math, sys
j = json.load(open(sys.argv[1]))
assert j["schema"] == "itera.plan/1"
r = j["recommendation"]
assert r["days"] == 30 and r["eligible"]
assert r["quantity"] == math.ceil(20000 / r["rate"]) <= 8
eligible = [c for c in j["candidates"] if c["eligible"]]
assert min(c["cost"] for c in eligible) == r["cost"]
assert abs(r["rental_cost"]["30"] - r["quantity"] * r["price"]["price_per_gpu_hour"] * 24 * 30) < 1e-6
body = j["order"]["body"]
assert list(body) == ["gpu", "days", "quantity", "environment", "email", "network"], list(body)
assert body["gpu"] == r["card"] and body["days"] == 30 and body["quantity"] == r["quantity"]
assert "@" not in body["email"]
assert [c["days"] for c in j["campaigns"]] == [3, 7, 30]
PY
expect 0 "plan server" -- "$itera" plan "$d4/server.jsonl" --prices "$prices" --target-tokens-per-s 3000
contains "$tmp/out" "2 x h200-sxm-141gb for 30 days" "plan server"

# bad input
cat >"$tmp/bad-prices.json" <<'JSON'
[
  {"card": "l4-24gb", "price_per_gpu_hour": "0.79", "currency": "USD", "date": "2026-11-29", "source": "t"},
  {"card": "l40s-48gb", "currency": "USD", "date": "2026-11-29", "source": "t"},
  {"card": "h200-sxm-141gb", "price_per_gpu_hour": "-3.79", "currency": "USD", "date": "2026-11-29", "source": "t"},
  {"card": "rtx-9090", "price_per_gpu_hour": 1, "currency": "USD", "date": "2026-11-29", "source": "t"},
  {"card": "b200-sxm-180gb", "price_per_gpu_hour": 5.5, "currency": "USD", "date": "2026-13-01", "source": "t"}
]
JSON
expect 5 "cost bad prices" -- "$itera" cost "$d4/offline.jsonl" --prices "$tmp/bad-prices.json"
contains "$tmp/err" "row 2: missing field 'price_per_gpu_hour'" "cost bad prices"
contains "$tmp/err" "row 3: negative price -3.79" "cost bad prices"
contains "$tmp/err" "row 4: card 'rtx-9090' is not in the catalogue (known: l4-24gb" "cost bad prices"
contains "$tmp/err" "row 5: date '2026-13-01' is not a calendar date" "cost bad prices"
expect 5 "plan bad prices" -- "$itera" plan "$d4/offline.jsonl" --prices "$tmp/bad-prices.json"
contains "$tmp/err" "row 3: negative price" "plan bad prices"
printf 'not json' >"$tmp/notjson.json"
expect 5 "prices not json" -- "$itera" cost "$d4/offline.jsonl" --prices "$tmp/notjson.json"
expect 5 "prices missing" -- "$itera" cost "$d4/offline.jsonl" --prices "$tmp/none.json"
expect 2 "cost unknown card" -- "$itera" cost "$d4/offline.jsonl" --prices "$prices" --card nope
contains "$tmp/err" "card 'nope' is not in the catalogue" "cost unknown card"
sed 's/"variant":{"id":"h200-sxm-141gb"/"variant":{"id":"h999-sxm-1tb"/' "$d4/offline.jsonl" >"$tmp/uncatalogued.jsonl"
grep -q 'h999-sxm-1tb' "$tmp/uncatalogued.jsonl" || fail "fixture: no variant id to change"
expect 5 "cost card not in catalogue" -- "$itera" cost "$tmp/uncatalogued.jsonl" --prices "$prices"
contains "$tmp/err" "no catalogue match" "cost card not in catalogue"
sed 's/"cuda_runtime":"[^"]*"/"cuda_runtime":"9.9"/' "$d4/fp8.jsonl" >"$tmp/other.jsonl"
grep -q '"cuda_runtime":"9.9"' "$tmp/other.jsonl" || fail "fixture: no cuda_runtime field to change"
expect 5 "cost across recipes" -- "$itera" cost "$d4/offline.jsonl" "$tmp/other.jsonl" --prices "$prices"
contains "$tmp/err" "do not share a recipe" "cost across recipes"
expect 5 "plan across recipes" -- "$itera" plan "$d4/offline.jsonl" "$tmp/other.jsonl" --prices "$prices"
contains "$tmp/err" "do not share a recipe" "plan across recipes"
expect 5 "cost without llm" -- "$itera" cost "$data/2026-11-29-h200-run.jsonl" --prices "$prices"
contains "$tmp/err" "no finished case carries a throughput" "cost without llm"
expect 2 "plan bad days" -- "$itera" plan "$d4/offline.jsonl" --prices "$prices" --days 5
contains "$tmp/err" "3, 7 or 30" "plan bad days"
expect 5 "plan too few gpus" -- "$itera" plan "$d4/offline.jsonl" --prices "$prices" --target-tokens-per-s 1000000 --max-gpus 2
contains "$tmp/err" "no card can be recommended" "plan too few gpus"
expect 2 "plan unknown group" -- "$itera" plan "$d4/offline.jsonl" --prices "$prices" --group scenario=server
expect 2 "cost without prices" -- "$itera" cost "$d4/offline.jsonl"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "plan e2e: all passed"
