#!/usr/bin/env bash
# Browser test of the desk: installs playwright-core from package-lock.json under WORK_DIR (npm ci,
# never a browser download), starts the desk on a free loopback port with a fresh SQLite database,
# and drives Debian's chromium through order, "I paid", operator confirmation and the new status.
# Usage: run.sh ITERA_DESK SOURCE_DIR WORK_DIR   (screenshots: WORK_DIR/screenshots)
set -euo pipefail
desk=$1 src=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
[ -x /usr/bin/chromium ] || { echo "browser test: /usr/bin/chromium missing (Debian package chromium; scripts/common.sh installs it)" >&2; exit 1; }
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/order_flow.mjs" "$work/"
if ! cmp -s "$here/package-lock.json" "$work/node_modules/.itera-lock" 2>/dev/null; then
  (cd "$work" && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)
  cp "$here/package-lock.json" "$work/node_modules/.itera-lock"
fi
tmp=$(mktemp -d /tmp/itera-desk-browser.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
password="browser-test-$RANDOM-$RANDOM"
export ITERA_DESK_OPERATOR_PASSWORD_HASH=$(echo "$password" | "$desk" hash-password)
export ITERA_DESK_PORT=0 ITERA_DESK_DATABASE="sqlite:$tmp/desk.db" ITERA_DESK_PRICES_FILE=$src/data/desk/prices.example.json
"$desk" serve --config "$src/data/desk/desk.example.json" --port-file "$tmp/port" >"$tmp/desk.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || { cat "$tmp/desk.log" >&2; exit 1; }
rm -rf "$work/screenshots"
mkdir -p "$work/screenshots"
cd "$work"
DESK_URL="http://127.0.0.1:$(cat "$tmp/port")" DESK_PASSWORD="$password" SCREENSHOTS="$work/screenshots" \
  PROFILE_DIR="$tmp" node order_flow.mjs
if grep -q "$password" "$tmp/desk.log"; then echo "browser test: the log holds the password" >&2; exit 1; fi
