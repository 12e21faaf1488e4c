#!/usr/bin/env bash
# Quick start 2: install what is missing, build, and run every test. Device tests (label "device")
# run where a GPU is usable and are reported as skipped, with the reason, where none is.
source "$(dirname "$0")/common.sh"
itera_install_missing
itera_build
cd "$ITERA_BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
