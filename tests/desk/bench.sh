#!/usr/bin/env bash
# Throughput of the desk on loopback, measured with wrk (Debian package wrk): order creation
# (POST /api/v1/orders, each request a new order) and the order page (GET /o/TOKEN), on SQLite.
# Not part of ctest (a number depends on the machine); docs/perf/2026-11-29-desk.md has the results.
# Usage: bench.sh ITERA_DESK SOURCE_DIR [SECONDS] [CONNECTIONS]
set -euo pipefail
desk=$1 src=$2 seconds=${3:-10} conns=${4:-16}
command -v wrk >/dev/null || { echo "bench: wrk missing (apt-get install wrk)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/itera-desk-bench.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
export ITERA_DESK_PORT=0 ITERA_DESK_DATABASE="sqlite:$tmp/desk.db" ITERA_DESK_PRICES_FILE=$src/data/desk/prices.example.json
export ITERA_DESK_ORDERS_PER_MINUTE=10000000 ITERA_DESK_ORDER_BURST=10000000 ITERA_DESK_LOG_REQUESTS=${ITERA_DESK_LOG_REQUESTS:-1}
"$desk" serve --config "$src/data/desk/desk.example.json" --port-file "$tmp/port" 2>"$tmp/desk.log" &
pid=$!
for _ in $(seq 1 200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || { cat "$tmp/desk.log" >&2; exit 1; }
url="http://127.0.0.1:$(cat "$tmp/port")"
cat >"$tmp/create.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"gpu":"h100-pcie-80gb","days":7,"quantity":1,"environment":"bare","email":"bench@example.com","network":"USDT-TRON"}'
LUA
echo "== order creation: wrk -t1 -c$conns -d${seconds}s -s create.lua $url/api/v1/orders"
wrk -t1 -c"$conns" -d"${seconds}s" --latency -s "$tmp/create.lua" "$url/api/v1/orders"
token=$(curl -s -H 'Content-Type: application/json' -d '{"gpu":"l4-24gb","days":3,"quantity":1,"environment":"bare","email":"b@example.com","network":"BTC"}' \
  "$url/api/v1/orders" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
echo "== order page: wrk -t1 -c$conns -d${seconds}s $url/o/TOKEN"
wrk -t1 -c"$conns" -d"${seconds}s" --latency "$url/o/$token"
echo "== log lines written by the desk: $(wc -l <"$tmp/desk.log")"
