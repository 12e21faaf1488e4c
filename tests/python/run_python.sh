#!/usr/bin/env bash
# The Python package's CTest entries (tests/python/CMakeLists.txt):
#   run_python.sh pytest      BUILD_PYTHON_DIR SOURCE_PYTHON_DIR ITERA_CLI [pytest args...]
#   run_python.sh pip_install BUILD_PYTHON_DIR SOURCE_PYTHON_DIR ITERA_CLI BUILD_DIR
#   run_python.sh overhead    BUILD_PYTHON_DIR SOURCE_PYTHON_DIR ITERA_CLI
# Exit 77 (skipped) with the reason when the module was not built here or a tool is missing.
set -uo pipefail
mode=${1:?mode} build=${2:?build python dir} src=${3:?source python dir} cli=${4:?itera cli}
shift 4

skip() { echo "SKIPPED: $*"; exit 77; }
env_file=$build/itera_python.env
[ -f "$env_file" ] || skip "$env_file is missing: the tree was configured without cmake/python.cmake"
# shellcheck disable=SC1090
source "$env_file"
[ "${ITERA_PYTHON_MODULE_BUILT:-0}" = 1 ] || skip "the Python module was not built: ${ITERA_PYTHON_SKIP_REASON:-unknown}"
py=$ITERA_PYTHON_EXECUTABLE
compgen -G "$build/itera/_itera*.so" >/dev/null ||
  { echo "FAILED: no $build/itera/_itera*.so: build the target itera_python first"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/itera-python-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1  # never the source folder: python/itera there has no compiled module
export ITERA_CLI=$cli

case $mode in
  pytest)
    "$py" -c "import pytest" 2>/dev/null || skip "pytest is not installed for $py (Debian: apt-get install python3-pytest)"
    PYTHONPATH=$build${PYTHONPATH:+:$PYTHONPATH} "$py" -m pytest -p no:cacheprovider -q -rs "$src/tests" "$@"
    exit $?
    ;;
  pip_install)
    root=${1:?build dir}
    "$py" -m pip --version >/dev/null 2>&1 || skip "pip is not installed for $py (Debian: apt-get install python3-pip)"
    "$py" -c "import setuptools, wheel" 2>/dev/null ||
      skip "setuptools or wheel is not installed for $py (Debian: apt-get install python3-setuptools python3-wheel)"
    # Offline, from the checkout, reusing this build (ITERA_BUILD_DIR: no second configure).
    ITERA_BUILD_DIR=$root "$py" -m pip install -q --no-build-isolation --no-deps --no-index --target "$tmp/site" "$src" ||
      { echo "FAILED: pip install of $src"; exit 1; }
    PYTHONPATH=$tmp/site "$py" - "$tmp/installed.jsonl" <<'PY' || exit 1
import os, sys
import itera
here = os.path.dirname(itera.__file__)
assert here.startswith(os.path.dirname(sys.argv[1])), f"itera imported from {here}, not the installed copy"
with itera.Session("pip-installed", sys.argv[1], device="none") as s:
    with s.case({"batch": 2}):
        for _ in range(3):
            with s.iteration():
                with s.stage("work"):
                    sum(range(10000))
                s.count("items", 2)
print(f"installed itera {itera.__version__} in {here}: {len(s.cases)} case written")
PY
    "$cli" report "$tmp/installed.jsonl" >"$tmp/report.md" || { echo "FAILED: itera report"; exit 1; }
    grep -q "work" "$tmp/report.md" || { echo "FAILED: the report has no stage 'work':"; cat "$tmp/report.md"; exit 1; }
    echo "itera report reads the installed package's results"
    ;;
  overhead)
    PYTHONPATH=$build${PYTHONPATH:+:$PYTHONPATH} "$py" "$src/bench/overhead.py" --mode host --steps 300 --rounds 3 \
      --max-overhead 0.10 --max-scope-us 50 "$@"
    exit $?
    ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
