"""Sessions from Python: what a case records (stages, samples, counters, memory marks), the results
file read back as itera results, decorators and the module-level stage, threads, and privacy (R18)."""

import json
import os
import sys
import threading

import numpy as np
import pytest

import itera
from conftest import busy_us, metric_of, read_lines, stage_of


def test_a_case_with_nested_stages_is_written_as_itera_results(tmp_path):
    path = tmp_path / "run.jsonl"
    with itera.Session("app", path, device="none", fields={"model": "toy"}, label="nightly profile") as s:
        prepare, read, compute = s.stage("prepare"), s.stage("read"), s.stage("compute")
        with s.case({"batch": 4, "loop": "end_to_end"}, warmup=2, fields={"precision.compute": "fp32"}) as c:
            for _ in range(2 + 6):
                with s.iteration():
                    with prepare:
                        with read:
                            s.count("bytes_read", 1000)
                            busy_us(200)
                    with compute:
                        s.count(itera.Counter.flops, 5e6)
                        busy_us(1000)
                    s.count("items", 4)
                    s.count(itera.Counter.steps, 1)
    lines = read_lines(path)
    assert [l["type"] for l in lines] == ["context", "case"]
    context, case = lines
    assert context["schema"] == "itera.result/1"
    assert context["command"] == "nightly profile"  # the label, never argv
    assert case == c.record
    assert case["workload"] == "app" and case["status"] == "ok", case["message"]
    assert case["axes"] == {"batch": "4", "loop": "end_to_end"}
    assert case["fields"] == {"model": "toy", "precision.compute": "fp32"}
    assert case["warmup"]["count"] == 2
    assert len(case["samples"]["host_ns"]) == 6
    assert case["stop_reason"] == "user_loop"
    assert case["details"]["recorded_by"] == "itera user API"
    # Warm-up iterations' stages and counts are dropped: 6 measured calls each.
    assert [(st["path"], st["calls"]) for st in case["stages"]] == [("prepare", 6), ("prepare/read", 6), ("compute", 6)]
    assert stage_of(case, "prepare/read")["bytes_read"] == 6000
    assert stage_of(case, "compute")["flops"] == 6 * 5e6
    assert stage_of(case, "compute")["device_ns"] == -1  # no stream: host time only
    assert stage_of(case, "compute")["host_ns"] >= 6 * 1000e3
    assert metric_of(case, "count/items") == 24
    assert metric_of(case, "count/steps") == 6 and metric_of(case, "throughput/steps_per_s") > 0
    assert [c.name for c in itera.Counter.__members__.values()] == [
        "bytes_read", "bytes_written", "flops", "items", "tokens", "output_tokens", "images", "steps"]
    assert metric_of(case, "count/bytes_read") == 6000
    # Units per iteration over the median iteration (the built-in runner's rule).
    median_s = case["stats"]["device"]["median"] * 1e-9
    assert metric_of(case, "throughput/items_per_s") == pytest.approx(4 / median_s, rel=1e-9)
    # Hyndman & Fan 7 over the raw samples: numpy's default percentile.
    samples = np.array(case["samples"]["host_ns"])
    assert case["stats"]["host"]["median"] == pytest.approx(np.percentile(samples, 50))
    assert case["stats"]["host"]["percentiles"]["p90"]["value"] == pytest.approx(np.percentile(samples, 90))
    assert case["stats"]["host"]["percentiles"]["p90"]["reliable"] is False  # 6 samples


def test_the_results_file_reads_back_through_itera_report(tmp_path, report):
    path = tmp_path / "run.jsonl"
    with itera.Session("pyapp", path, device="none") as s:
        for side in (128, 256):
            with s.case({"side": side}, warmup=1):
                decode = s.stage("decode")
                for _ in range(4):
                    with s.iteration():
                        with decode:
                            busy_us(100)
                        s.count("images", 1)
    text = report(path)
    assert "### pyapp (version 1)" in text
    assert "decode" in text and "| 128" in text and "| 256" in text


def test_cases_in_memory_and_the_session_properties():
    s = itera.Session("mem", device="none")
    assert s.results_path is None and s.backend == "cpu" and s.device == -1
    assert "device_none" in s.host_only_reason
    assert s.context["type"] == "context" and s.context["backend"] == "cpu"
    with s.stage("x"):
        pass
    record = s.end_case()  # the stage began a case with no axes
    assert record["axes"] == {} and s.cases == [record]
    s.close()
    s.close()  # idempotent
    assert s.closed
    with pytest.raises(itera.UsageError, match="closed"):
        with s.stage("after"):
            pass


def test_an_existing_results_file_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "keep.jsonl"
    path.write_text("precious\n")
    with pytest.raises(itera.UsageError, match="already exists"):
        itera.Session("app", path, device="none")
    assert path.read_text() == "precious\n"


def test_a_session_refused_for_torch_memory_leaves_no_file(tmp_path):
    path = tmp_path / "torch.jsonl"
    with pytest.raises(itera.UsageError, match="torch_memory=True"):
        itera.Session("app", path, device="none", torch_memory=True)
    assert not path.exists()  # the same call can be made again once fixed
    with pytest.raises(itera.UsageError, match="torch_memory='yes'"):
        itera.Session("app", path, device="none", torch_memory="yes")
    itera.Session("app", path, device="none", torch_memory=False).close()
    assert path.exists()


def test_bad_arguments_name_what_was_wrong():
    with pytest.raises(itera.UsageError, match="device="):
        itera.Session("app", device="gpu0")
    with pytest.raises(itera.UsageError, match="name"):
        itera.Session("", device="none")
    with pytest.raises(itera.UsageError, match="results_path is empty"):
        itera.Session("app", "", device="none")
    with itera.Session("app", device="none") as s:
        with pytest.raises(itera.UsageError, match="unknown counter 'bytes'"):
            s.count("bytes", 1)
        with pytest.raises(itera.UsageError, match="not a finite number"):
            s.count("items", -1)
        with pytest.raises(itera.UsageError, match="contains '/'"):
            s.stage("a/b")
        with pytest.raises(itera.UsageError, match="user_bytes"):
            s.mark_memory("m", -5)
        with pytest.raises(itera.UsageError, match="warmup"):
            s.begin_case({"a": 1}, warmup=-1)
        with pytest.raises(itera.UsageError, match="stream"):
            s.stage("x", stream="default")
        with pytest.raises(itera.UsageError, match="not a stream itera knows"):
            s.stage("x", stream=object())
        s.begin_case({"batch": 1})
        with pytest.raises(itera.UsageError, match="already open"):
            s.begin_case({"batch": 2})
        s.end_case()
        with pytest.raises(itera.UsageError, match="already recorded"):
            s.begin_case({"batch": 1})
        with pytest.raises(itera.UsageError, match="no case is open"):
            s.end_case()


def test_decorators_time_every_call_and_let_exceptions_through():
    with itera.Session("deco", device="none") as s:
        @s.stage("fib")
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        @s.stage("fails")
        def fails():
            raise KeyError("boom")

        assert fib.__name__ == "fib"
        assert fib(4) == 3
        with pytest.raises(KeyError):
            fails()
        record = s.end_case()
    assert record["status"] == "ok"
    # Recursion nests a fresh stage per call: fib, fib/fib, ...
    calls = {st["path"]: st["calls"] for st in record["stages"]}
    assert calls["fib"] == 1 and calls["fib/fib"] == 2 and calls["fails"] == 1
    assert sum(calls[p] for p in calls if p.startswith("fib")) == 9


def test_module_level_stages_record_into_the_current_session_or_nothing():
    @itera.stage("work")
    def work():
        busy_us(50)
        return 7

    assert itera.current_session() is None
    assert work() == 7  # no session: runs unrecorded
    with itera.stage("loose"):
        pass
    with itera.Session("outer", device="none") as outer:
        with itera.Session("inner", device="none") as inner:
            assert itera.current_session() is inner
            work()
            with itera.iteration():
                with itera.stage("loop"):
                    pass
        assert itera.current_session() is outer
        work()
    assert itera.current_session() is None
    assert [st["path"] for st in inner.cases[0]["stages"]] == ["work", "loop"]
    assert len(inner.cases[0]["samples"]["host_ns"]) == 1
    assert [st["path"] for st in outer.cases[0]["stages"]] == ["work"]


def test_one_module_level_stage_object_shared_by_threads_and_nested_in_itself():
    shared = itera.stage("shared")
    together = threading.Barrier(3)
    errors = []

    def worker():
        try:
            together.wait()
            for _ in range(100):
                with shared:
                    with shared:  # nested in itself: shared/shared
                        pass
            together.wait()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    with itera.Session("lazy", device="none") as s:
        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with pytest.raises(itera.StageError, match="exited before it was entered"):
            shared.__exit__(None, None, None)
        r = s.end_case()
    assert errors == []
    assert {st["path"]: st["calls"] for st in r["stages"]} == {"shared": 300, "shared/shared": 300}


def test_memory_marks_keep_peaks_per_label_and_give_stage_peaks():
    with itera.Session("mem", device="none") as s:
        s.mark_memory("weights", 1000)
        with s.stage("forward"):
            s.mark_memory("activations", 5000)
            s.mark_memory("activations", 3000)
        with s.stage("probe", memory=True):  # no PyTorch memory here: RSS under the stage's name
            pass
        s.mark_memory("host_only")
        r = s.end_case()
    assert metric_of(r, "memory/measured_peak") == 5000
    assert metric_of(r, "memory/mark/weights/allocator") == 1000
    assert metric_of(r, "memory/mark/activations/allocator") == 5000
    assert metric_of(r, "memory/mark/host_only/host_rss") > 0
    assert metric_of(r, "memory/mark/probe/host_rss") > 0
    assert metric_of(r, "memory/mark/probe/allocator") is None
    assert stage_of(r, "forward")["memory_peak_bytes"] == 5000
    assert stage_of(r, "forward")["memory_end_bytes"] == 3000
    assert "device_none" in r["details"]["memory.device_in_use"]


def test_threads_record_into_their_own_lanes_and_the_case_merges_them():
    with itera.Session("threads", device="none") as s:
        s.begin_case({"threads": 4})
        together = threading.Barrier(4)  # all alive at once: a thread's id is not reused by the next

        def worker():
            together.wait()
            stage = s.stage("work")  # one scope per thread, entered many times
            for _ in range(50):
                with stage:
                    s.count("items", 1)
            together.wait()

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        r = s.end_case()
    assert stage_of(r, "work")["calls"] == 200
    assert metric_of(r, "count/items") == 200
    assert r["details"]["threads"] == "4"


def test_a_case_block_that_raises_fails_the_case_with_the_exception_and_keeps_what_it_measured(tmp_path):
    path = tmp_path / "raised.jsonl"
    with itera.Session("app", path, device="none") as s:
        with pytest.raises(ZeroDivisionError):
            with s.case({"batch": 2}) as c:
                for _ in range(3):
                    with s.iteration():
                        with s.stage("step"):
                            s.count("images", 2)
                1 / 0
        assert not s.case_open
        with s.case({"batch": 4}) as ok:
            with s.iteration():
                pass
    lines = read_lines(path)
    assert [l.get("axes") for l in lines[1:]] == [{"batch": "2"}, {"batch": "4"}]
    failed = lines[1]
    assert failed == c.record
    assert failed["status"] == "failed"
    assert failed["message"] == "ZeroDivisionError: division by zero"
    assert "python.exception" not in failed["fields"]  # the reason is the case's message now
    assert stage_of(failed, "step")["calls"] == 3  # what it measured is kept
    assert len(failed["samples"]["host_ns"]) == 3 and metric_of(failed, "count/images") == 6
    assert failed["stats"] == {}  # but no statistics: never compared with a complete run
    assert ok.record["status"] == "ok" and lines[2]["status"] == "ok"


def test_the_reason_of_a_raising_block_is_one_line_cut_to_200_characters():
    class Custom(Exception):
        pass

    with itera.Session("app", device="none") as s:
        with pytest.raises(Custom):
            with s.case({"what": "long"}) as long_case:
                raise Custom("x" * 500 + "\nsecond line")
        with pytest.raises(KeyError):
            with s.case({"what": "empty"}) as empty_case:
                raise KeyError()
        with pytest.raises(RuntimeError):
            with s.case({"what": "lines"}) as lines_case:
                raise RuntimeError("first\tline\nsecond line\n")
    assert long_case.record["message"] == "Custom: " + "x" * 200 + "..."
    assert empty_case.record["message"] == "KeyError"  # the type alone when there is no message
    assert lines_case.record["message"] == "RuntimeError: first line second line"
    assert itera._session.failure_reason(ValueError("é" * 300)) == "ValueError: " + "é" * 200 + "..."


def test_a_raising_block_with_a_stage_left_open_still_raises_its_own_exception():
    with itera.Session("app", device="none") as s:
        with pytest.raises(ValueError, match="the real problem"):
            with s.case({"batch": 1}) as c:
                left_open = s.stage("decode")
                left_open.enter()  # left open: named after the reason, no StageError
                raise ValueError("the real problem")
        assert left_open.is_open  # the scope outlives its case; exiting it now says so
        with pytest.raises(itera.StageError, match="still open when its case ended"):
            left_open.exit()
    assert c.record["status"] == "failed"
    assert c.record["message"].startswith("ValueError: the real problem; and ")
    assert "stage 'decode' was never exited" in c.record["message"]


def test_a_block_that_ends_its_case_and_then_raises_fails_nothing_else():
    with itera.Session("app", device="none") as s:
        with pytest.raises(OSError):
            with s.case({"batch": 1}) as c:
                s.end_case()
                raise OSError("after the end")
        assert not s.case_open
    assert c.record["status"] == "ok" and s.cases == [c.record]


def test_fail_case_and_case_open(tmp_path):
    path = tmp_path / "failed.jsonl"
    with itera.Session("app", path, device="none") as s:
        assert s.case_open is False
        with pytest.raises(itera.UsageError, match="no case is open to fail"):
            s.fail_case("nothing open")
        s.begin_case({"batch": 1}, warmup=1)
        assert s.case_open is True
        for _ in range(1 + 2):
            with s.iteration():
                s.count("items", 1)
        with pytest.raises(itera.UsageError, match="fail_case needs a reason"):
            s.fail_case("")
        assert s.case_open  # refused: still open
        record = s.fail_case("the answer was wrong")
        assert not s.case_open
        s.count("items", 1)  # a count outside a case begins one with no axes
        assert s.case_open
    assert not s.case_open  # closing ended it
    assert record["status"] == "failed" and record["message"] == "the answer was wrong"
    assert len(record["samples"]["host_ns"]) == 2 and record["warmup"]["count"] == 1
    assert [l["status"] for l in read_lines(path)[1:]] == ["failed", "ok"]


def test_a_session_block_that_raises_fails_the_open_case(tmp_path):
    path = tmp_path / "session_raised.jsonl"
    with pytest.raises(RuntimeError):
        with itera.Session("app", path, device="none") as s:
            s.begin_case({"batch": 1})
            with s.iteration():
                pass
            raise RuntimeError("stopped halfway")
    (case,) = read_lines(path)[1:]
    assert case["status"] == "failed" and case["message"] == "RuntimeError: stopped halfway"
    assert len(case["samples"]["host_ns"]) == 1
    assert s.closed


def test_the_results_hold_labels_and_numbers_only(tmp_path):
    # R18: nothing of the process (argv, file names, the data it handled) enters the results unless
    # passed as a label.
    secret_file = tmp_path / "private-customer-photo.jpg"
    secret_file.write_bytes(b"\xff\xd8 not really a jpeg")
    prompt = "my confidential prompt about project zebra"
    path = tmp_path / "private-customer-prompts.jsonl"
    with itera.Session("app", path, device="none") as s:
        with s.case({"batch": 1}):
            with s.iteration():
                with s.stage("decode"):
                    data = secret_file.read_bytes()
                    s.count("bytes_read", len(data))
                with s.stage("tokenize"):
                    tokens = prompt.split()
                    s.count("tokens", len(tokens))
    text = path.read_text()
    for private in ("private-customer", "zebra", "confidential", str(tmp_path), os.path.basename(sys.argv[0])):
        assert private not in text, private
    assert '"decode"' in text and '"tokenize"' in text
    json.loads(text.splitlines()[0])


def test_version_and_build_info_agree_with_the_project():
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        cmake = f.read()
    with open(os.path.join(root, "python", "pyproject.toml")) as f:
        pyproject = f.read()
    import re
    cmake_version = re.search(r"project\(itera VERSION ([0-9.]+)", cmake).group(1)
    assert itera.__version__ == cmake_version
    assert f'version = "{cmake_version}"' in pyproject
    assert itera.build_info["version"] == cmake_version
    assert isinstance(itera.built_with_cuda, bool)
    assert issubclass(itera.UsageError, ValueError) and issubclass(itera.StageError, itera.UsageError)
    assert issubclass(itera.DeviceError, RuntimeError) and issubclass(itera.WriteError, OSError)
    assert all(issubclass(e, itera.Error) for e in (itera.UsageError, itera.DeviceError, itera.WriteError,
                                                     itera.InputError, itera.CallbackError))


def test_numpy_numbers_are_accepted_where_python_ones_are():
    with itera.Session("np", device="none") as s:
        s.begin_case({"batch": np.int64(8)}, warmup=np.int64(1))
        for _ in range(3):
            with s.iteration():
                s.count("items", np.int64(8))
                s.count("flops", np.float32(1.5e9))
        s.mark_memory("buffers", np.int64(4096))
        r = s.end_case()
    assert r["axes"] == {"batch": "8"} and r["warmup"]["count"] == 1
    assert metric_of(r, "count/items") == 16
    assert metric_of(r, "memory/mark/buffers/allocator") == 4096
