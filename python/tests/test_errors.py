"""Bad input from Python: stages closed twice, out of order, on another thread or never; streams the
session cannot take. Each is a clear Python exception, and what was recorded is kept."""

import threading

import pytest

import itera
from conftest import read_lines, stage_of


def test_a_stage_exited_twice_or_before_entering(host_session):
    s = host_session
    decode = s.stage("decode")
    with pytest.raises(itera.StageError, match="stage 'decode' exited before it was entered"):
        decode.exit()
    decode.enter()
    decode.exit()
    with pytest.raises(itera.StageError, match="stage 'decode' exited twice: it is not open"):
        decode.exit()
    with decode:
        with pytest.raises(itera.StageError, match="already open"):
            decode.enter()
    r = s.end_case()
    assert r["status"] == "ok" and stage_of(r, "decode")["calls"] == 2


def test_scopes_exited_out_of_order(host_session):
    s = host_session
    outer, inner = s.stage("outer"), s.stage("inner")
    outer.enter()
    inner.enter()
    with pytest.raises(itera.StageError, match="stage 'outer' exited while stage 'outer/inner' inside it is still open"):
        outer.exit()
    inner.exit()
    outer.exit()
    assert s.end_case()["status"] == "ok"


def test_a_stage_exited_on_another_thread(host_session):
    s = host_session
    st = s.stage("x").enter()
    caught = []

    def other():
        try:
            st.exit()
        except itera.StageError as e:
            caught.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert caught and "entered on another thread" in caught[0]
    st.exit()
    assert s.end_case()["status"] == "ok"


def test_a_stage_never_exited_fails_its_case_which_keeps_what_it_measured(tmp_path):
    path = tmp_path / "never.jsonl"
    with itera.Session("app", path, device="none") as s:
        s.begin_case({"batch": 4})
        with s.stage("done"):
            s.count("bytes_read", 100)
        left_open = s.stage("decode").enter()
        with pytest.raises(itera.StageError, match=r"case batch=4 of 'app': stage 'decode' was never exited \(the case "
                                                   r"was written as failed"):
            s.end_case()
        assert left_open.is_open  # the scope object outlives its case, still open
        with pytest.raises(itera.StageError, match="still open when its case ended"):
            left_open.exit()
        assert not left_open.is_open
        s.begin_case({"batch": 8})  # the session goes on
        with s.stage("done"):
            pass
    failed, ok = read_lines(path)[1:]
    assert failed["status"] == "failed" and "'decode' was never exited" in failed["message"]
    assert stage_of(failed, "done")["bytes_read"] == 100
    assert stage_of(failed, "decode")["calls"] == 1
    assert ok["status"] == "ok"


def test_an_exception_inside_nested_with_blocks_is_never_hidden(host_session):
    s = host_session
    outer, inner = s.stage("outer"), s.stage("inner")
    with pytest.raises(RuntimeError, match="the real problem"):
        with outer:
            inner.enter()  # left open by mistake: exiting outer fails, but the RuntimeError goes on
            raise RuntimeError("the real problem")
    with pytest.raises(itera.StageError, match="never exited"):
        s.end_case()
    r = s.cases[-1]
    assert r["status"] == "failed" and "'outer/inner' was never exited" in r["message"]


def test_iterations_do_not_nest_and_must_agree_on_streams(host_session):
    s = host_session
    with s.iteration():
        with pytest.raises(itera.StageError, match="iteration is already open"):
            with s.iteration():
                pass
    s.end_case()


def test_a_stream_for_a_session_without_a_device():
    with itera.Session("app", device="none") as s:
        if itera.built_with_cuda:
            # Refused before CUDA sees the handle: the session has no device.
            with pytest.raises(itera.UsageError, match="records host time only"):
                with s.stage("x", stream=0x1234):
                    pass
            assert s.end_case()["stages"] == []  # the case the attempt began holds nothing
        else:
            with s.stage("x", stream=0x1234):
                pass
            r = s.end_case()
            assert stage_of(r, "x")["device_ns"] == -1
            assert "built without CUDA" in r["details"]["streams"]
        # 'current' on a host-only session is no stream: portable code runs on a CPU machine.
        s.begin_case({"part": "current"})
        with s.stage("y", stream="current"):
            pass
        assert stage_of(s.end_case(), "y")["device_ns"] == -1


def test_a_device_that_cannot_be_used_is_an_error_not_a_fallback():
    if itera.built_with_cuda:
        try:
            probe = itera.Session("probe", device="auto")
        except itera.Error as e:
            pytest.fail(f"device='auto' must fall back to host time, not fail: {e}")
        usable = probe.backend == "cuda"
        probe.close()
        if usable:
            pytest.skip("a GPU is usable here: test_torch covers the device")
        with pytest.raises(itera.UsageError, match="no usable CUDA device"):
            itera.Session("app", device=0)
    else:
        s = itera.Session("app", device=0)  # built without CUDA: host time, and the results say so
        assert s.backend == "cpu" and "built without CUDA" in s.host_only_reason
        s.close()
