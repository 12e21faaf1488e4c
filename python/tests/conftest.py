"""Shared helpers of the Python package's tests (run: tests/python/run_python.sh, or
PYTHONPATH=<build>/python python3 -m pytest python/tests from outside python/)."""

import json
import os
import shutil
import subprocess
import time

import pytest

try:
    import itera
except ImportError as e:  # the source folder's itera/ has no compiled module
    raise ImportError(f"{e}: import the built package (PYTHONPATH=<build>/python) or the installed one (pip install "
                      f"--no-build-isolation ./python), and run pytest from outside python/") from e


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def stage_of(case, path):
    for s in case["stages"]:
        if s["path"] == path:
            return s
    return None


def metric_of(case, name):
    for m in case.get("metrics", []):
        if m["name"] == name:
            return m["value"]
    return None


def busy_us(us):
    end = time.perf_counter_ns() + int(us * 1e3)
    while time.perf_counter_ns() < end:
        pass


@pytest.fixture
def host_session():
    """A host-only session keeping its cases in memory."""
    with itera.Session("app", device="none") as s:
        yield s


@pytest.fixture
def itera_cli():
    cli = os.environ.get("ITERA_CLI") or shutil.which("itera")
    if not cli or not os.path.exists(cli):
        pytest.skip("the itera command is not available (set ITERA_CLI=<build>/itera)")
    return cli


@pytest.fixture
def report(itera_cli):
    def run(*args):
        out = subprocess.run([itera_cli, "report", *map(str, args)], capture_output=True, text=True)
        assert out.returncode == 0, f"itera report failed ({out.returncode}): {out.stderr}"
        return out.stdout
    return run
