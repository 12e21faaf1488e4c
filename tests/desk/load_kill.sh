#!/usr/bin/env bash
# Bounded load on loopback with a kill -9 of the service in the middle: many concurrent order
# creations and "I paid" presses; the service is killed, restarted, and every order it acknowledged
# must still be there, once (desk_load_client checks). Prints the p99 latencies.
# The access log is on, and is checked for contact details, order links and the operator token.
# Usage: load_kill.sh ITERA_DESK LOAD_CLIENT SOURCE_DIR sqlite|postgres [PG_CONNINFO_FILE] [ORDERS]
set -euo pipefail
desk=$1 client=$2 src=$3 kind=$4 pg_info=${5:-} orders=${6:-3000}
tmp=$(mktemp -d /tmp/itera-desk-load.XXXXXX)
pid=""
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

token=$("$desk" new-token)
export ITERA_DESK_OPERATOR_TOKEN_HASH=$(echo "$token" | "$desk" hash-token)
export ITERA_DESK_PORT=0 ITERA_DESK_ORDERS_PER_MINUTE=10000000 ITERA_DESK_ORDER_BURST=10000000 ITERA_DESK_LOG_REQUESTS=1
export ITERA_DESK_PRICES_FILE=$src/data/desk/prices.example.json
if [ "$kind" = sqlite ]; then
  export ITERA_DESK_DATABASE="sqlite:$tmp/desk.db"
else
  admin=$(cat "$pg_info")
  name="desk_load_$$"
  psql "$admin" -q -c "CREATE DATABASE $name" >/dev/null
  export ITERA_DESK_DATABASE="$admin dbname=$name"
fi

start() {
  rm -f "$tmp/port"
  "$desk" serve --config "$src/data/desk/desk.example.json" --port-file "$tmp/port" >>"$tmp/desk.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do [ -s "$tmp/port" ] && return 0; sleep 0.05; done
  echo "load_kill: the desk did not start:" >&2; cat "$tmp/desk.log" >&2; exit 1
}

start
"$client" --port-file "$tmp/port" --orders "$orders" --threads 16 --operator-token "$token" --progress-file "$tmp/progress" >"$tmp/summary.json" 2>"$tmp/client.err" &
client_pid=$!
# Kill -9 once a quarter of the orders are acknowledged, while requests are in flight.
for _ in $(seq 1 6000); do
  n=0
  [ -s "$tmp/progress" ] && read -r n <"$tmp/progress" || true
  [ "$n" -ge $((orders / 4)) ] && break
  sleep 0.01
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
before=$n
echo "load_kill: killed the desk (kill -9) with $before orders acknowledged; restarting"
start
status=0
wait "$client_pid" || status=$?
cat "$tmp/summary.json"
cat "$tmp/client.err" >&2
# The log has one line per request (so the checks below look at something), and none of them holds
# the customer's email, an order link or the operator token.
if ! grep -q "desk: POST /api/v1/orders 201" "$tmp/desk.log" || ! grep -q "desk: POST /api/v1/orders/:token/paid 200" "$tmp/desk.log"; then
  echo "load_kill: FAIL: the access log is missing (ITERA_DESK_LOG_REQUESTS)" >&2; status=1
fi
if grep -qiE "customer|load@example.com|$token|/o/[A-Za-z0-9_-]{43}|/orders/[A-Za-z0-9_-]{43}" "$tmp/desk.log"; then
  echo "load_kill: FAIL: the log holds contact details, an order link or the token" >&2; status=1
fi
kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
pid=""
if [ "$kind" = postgres ]; then psql "$admin" -q -c "DROP DATABASE $name WITH (FORCE)" >/dev/null || true; fi
[ "$before" -gt 0 ] && [ "$before" -lt "$orders" ] || { echo "load_kill: FAIL: the kill did not land during the load ($before of $orders acknowledged)" >&2; status=1; }
grep -q '"retries":0,' "$tmp/summary.json" && { echo "load_kill: FAIL: no request was retried: the kill did not interrupt the load" >&2; status=1; }
[ "$status" -eq 0 ] && echo "load_kill: $kind: every acknowledged order survived the kill, none duplicated"
exit "$status"
