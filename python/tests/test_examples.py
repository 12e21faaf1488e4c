"""The examples parse their arguments and say what they need before importing it. They run in full on
the GPU host (scripts/device_python.sh), where PyTorch, transformers and peft are installed."""

import importlib.util
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
SCRIPTS = ["image_text_pipeline.py", "lora_finetune.py"]


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_needs_nothing_but_python(script):
    out = run(script, "--help")
    assert out.returncode == 0, out.stderr
    assert "--out" in out.stdout


def test_bad_arguments_are_refused_before_anything_loads(tmp_path):
    out = run("image_text_pipeline.py", "--out", str(tmp_path / "x.jsonl"), "--loops", "compute,sideways")
    assert out.returncode == 2 and "'sideways' is not a loop" in out.stderr
    out = run("image_text_pipeline.py", "--out", str(tmp_path / "x.jsonl"), "--loops", "end_to_end")
    assert out.returncode == 2 and "--images DIR is needed" in out.stderr
    out = run("lora_finetune.py", "--out", str(tmp_path / "x.jsonl"), "--checkpointing", "sometimes")
    assert out.returncode == 2 and "--checkpointing takes off, on" in out.stderr


@pytest.mark.parametrize("script,needs", [("image_text_pipeline.py", "torch"), ("lora_finetune.py", "peft")])
def test_without_their_libraries_they_skip_with_the_reason(script, needs, tmp_path):
    if importlib.util.find_spec(needs) is not None:
        pytest.skip(f"{needs} is installed here: the example runs in full (scripts/device_python.sh)")
    out = run(script, "--out", str(tmp_path / "x.jsonl"), "--loops", "compute", "--serve-requests", "0") \
        if script == "image_text_pipeline.py" else run(script, "--out", str(tmp_path / "x.jsonl"))
    assert out.returncode == 77, out.stderr
    assert "SKIPPED: this example needs" in out.stderr
    assert not (tmp_path / "x.jsonl").exists()
