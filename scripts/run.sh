#!/usr/bin/env bash
# Quick start 1: install what is missing, build, and run the default suite (`itera run`).
# Extra arguments go to `itera run` (for example --backend cpu --out results/mine).
source "$(dirname "$0")/common.sh"
itera_install_missing
itera_build
exec "$ITERA_BUILD_DIR/itera" run "$@"
