#!/usr/bin/env bash
# Quick start 2: install what is missing, build, and run every test. Device tests (label "device")
# run where a GPU is usable and are reported as skipped, with the reason, where none is.
source "$(dirname "$0")/common.sh"
itera_install_missing
itera_build
cd "$ITERA_BUILD_DIR"
# Say up front why the device tests (label "device") will be skipped here, if they will.
python3 - <<'PY' "$("$ITERA_BUILD_DIR/itera" list --format json)"
import json, sys
for b in json.loads(sys.argv[1])["backends"]:
    if b["name"] == "cuda" and not b["usable"]:
        print(f"itera: device tests will be skipped: cuda backend not usable here: {b['reason']}")
PY
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
