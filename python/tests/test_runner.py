"""The runner with a Python callable: offline sweep under the stopping rule, server under Poisson load
(latency from the scheduled arrival), single stream, tokens; a callback that raises fails its case,
which keeps what it measured, the run goes on, and CallbackError says so at the end."""

import threading
import time

import pytest

import itera
from conftest import busy_us, metric_of, read_lines, stage_of

FAST_STOP = dict(min_samples=10, min_time_s=0.02, max_time_s=0.3, warmup_min_count=2, warmup_min_time_s=0)


def test_offline_sweep_times_each_batch_until_the_stopping_rule_holds(tmp_path, report):
    path = tmp_path / "offline.jsonl"
    warm = []
    with itera.Session("pyrunner", path, device="none", fields={"model": "toy"}) as s:
        forward = s.stage("forward")

        def one_batch(call):
            if call.warmup:
                warm.append(call.index)
            with forward:
                busy_us(100 * call.batch)
            s.count("images", call.batch)

        summary = s.run_offline(one_batch, [1, 3], axes={"loop": "compute"}, **FAST_STOP)
    assert summary.failed == 0 and summary.first_failure == ""
    assert [c["axes"] for c in summary.cases] == [{"loop": "compute", "scenario": "offline", "batch": "1"},
                                                  {"loop": "compute", "scenario": "offline", "batch": "3"}]
    assert len(warm) >= 4 and warm[:2] == [0, 1]
    for case, batch in zip(summary.cases, (1, 3)):
        assert case["status"] == "ok", case["message"]
        n = len(case["samples"]["host_ns"])
        assert n >= 10 and case["stop_reason"] in ("converged", "max_time", "max_samples")
        assert metric_of(case, "count/items") == batch * n  # each call counts its batch
        assert metric_of(case, "count/images") == batch * n
        assert stage_of(case, "forward")["calls"] == n  # warm-up calls' stages are dropped
        assert case["stats"]["host"]["median"] >= batch * 100e3
    assert read_lines(path)[1:] == summary.cases
    assert "scenario" in report(path)


def test_server_latency_runs_from_the_scheduled_arrival_and_tokens_give_ttft():
    with itera.Session("server", device="none") as s:
        def request(call):
            assert call.batch == 1 and call.scheduled_s >= 0
            busy_us(300)
            call.token()
            for _ in range(3):
                busy_us(100)
                call.token()

        summary = s.run_server(request, [200.0], concurrency=[1, 2], requests=40, ttft_s=0.05, tpot_s=0.01,
                               seed=7)
    assert summary.failed == 0
    assert [c["axes"]["batch"] for c in summary.cases] == ["1", "2"]
    for case in summary.cases:
        assert case["status"] == "ok", case["message"]
        assert case["axes"]["scenario"] == "server" and case["axes"]["rate"] == "200"
        assert case["device_time_method"] == "host_steady_clock_scheduled_arrival_to_completion"
        assert len(case["samples"]["host_ns"]) == 40
        assert metric_of(case, "load/completed") == 40
        assert metric_of(case, "count/output_tokens") == 4 * 40  # the warm-up request's are dropped
        ttft = metric_of(case, "latency/ttft/p50")
        assert ttft is not None and ttft >= 300e-6
        assert metric_of(case, "latency/tpot/p50") >= 90e-6
        assert metric_of(case, "load/meets_targets") in (0.0, 1.0)


def test_single_stream_issues_one_request_after_another():
    active = []
    with itera.Session("single", device="none") as s:
        def request(call):
            active.append(threading.get_ident())
            busy_us(200)

        summary = s.run_single_stream(request, requests=25, e2e_s=0.5, warmup_requests=2)
    case = summary.cases[0]
    assert case["status"] == "ok", case["message"]
    assert case["axes"]["scenario"] == "single_stream" and case["axes"]["requests"] == "25"
    assert len(case["samples"]["host_ns"]) == 25 and len(active) == 27
    assert len(set(active)) == 1  # one request at a time, on the calling thread
    assert min(case["samples"]["host_ns"]) >= 200e3


def test_a_callback_that_raises_fails_its_case_and_the_run_goes_on(tmp_path):
    path = tmp_path / "failing.jsonl"

    def flaky(call):
        if call.batch == 2 and call.index == 5:
            raise ValueError("out of memory, pretend")
        busy_us(50)

    with itera.Session("flaky", path, device="none") as s:
        with pytest.raises(itera.CallbackError) as info:
            s.run_offline(flaky, [1, 2, 4], **FAST_STOP)
        # raise_on_failure=False returns the summary instead.
        quiet = s.run_offline(flaky, [2], axes={"again": "yes"}, raise_on_failure=False, **FAST_STOP)
    error = info.value
    assert isinstance(error.__cause__, ValueError) and error.__cause__.__traceback__ is not None
    assert "1 of 3 case(s) failed" in str(error) and "out of memory, pretend" in str(error)
    summary = error.summary
    assert [c["status"] for c in summary.cases] == ["ok", "failed", "ok"]
    failed = summary.cases[1]
    assert failed["message"].startswith("the callback failed on call 5 (measured): ValueError: out of memory, pretend")
    assert failed["warmup"]["count"] == 2 and len(failed["samples"]["host_ns"]) == 3  # calls 2, 3, 4 measured
    assert quiet.failed == 1 and quiet.cases[0]["status"] == "failed"
    lines = read_lines(path)
    assert [l["status"] for l in lines[1:]] == ["ok", "failed", "ok", "failed"]  # every case written


def test_server_callback_failure_names_the_request():
    def request(call):
        if call.index == 3:
            raise RuntimeError("backend went away")

    with itera.Session("server", device="none") as s:
        with pytest.raises(itera.CallbackError) as info:
            s.run_server(request, [500.0], requests=10)
    case = info.value.summary.cases[0]
    assert case["status"] == "failed"
    assert "the callback failed on request 3" in case["message"]
    assert "RuntimeError: backend went away" in case["message"]
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_callback_exception_is_described_as_a_raising_case_block_is():
    # One rule for both (itera._session.failure_reason): "<type>: <message>", one line, 200 characters.
    long_text = "y" * 300 + "\nmore"

    def raises(call):
        raise ValueError(long_text)

    with itera.Session("reason", device="none") as s:
        summary = s.run_single_stream(raises, requests=3, warmup_requests=0, raise_on_failure=False)
        with pytest.raises(ValueError):
            with s.case({"block": 1}) as c:
                raise ValueError(long_text)
    reason = "ValueError: " + "y" * 200 + "..."
    assert c.record["message"] == reason
    message = summary.cases[0]["message"]
    assert message.startswith("the callback failed on request 0: " + reason + ";"), message
    assert "\n" not in message


def test_keyboard_interrupt_stops_the_run_and_is_raised_again():
    calls = []

    def interrupted(call):
        calls.append(call.batch)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with itera.Session("interrupt", device="none") as s:
        with pytest.raises(KeyboardInterrupt):
            s.run_offline(interrupted, [1, 2, 4], **FAST_STOP)
        assert len(calls) == 3  # the calls after it were not made
        assert [c["status"] for c in s.cases] == ["failed", "failed", "failed"]
        assert "interrupted" in s.cases[1]["message"]


def test_a_call_object_is_valid_only_inside_its_callback():
    kept = []
    with itera.Session("call", device="none") as s:
        s.run_single_stream(lambda call: kept.append(call), requests=2, warmup_requests=0)
    assert "finished" in repr(kept[0])
    with pytest.raises(itera.UsageError, match="after its callback returned"):
        kept[0].index
    with pytest.raises(itera.UsageError, match="after its callback returned"):
        kept[0].token()


def test_a_stage_left_open_by_the_callback_fails_the_call():
    with itera.Session("open", device="none") as s:
        leaked = s.stage("leaked")
        summary = s.run_offline(lambda call: leaked.enter(), [1], raise_on_failure=False, **FAST_STOP)
    assert summary.failed == 1
    assert "the iteration exited while stage 'leaked' inside it is still open" in summary.cases[0]["message"]


def test_options_that_cannot_run_are_refused_before_anything_runs():
    ran = []
    with itera.Session("opts", device="none") as s:
        with pytest.raises(itera.UsageError, match="batch size 0 is not positive"):
            s.run_offline(ran.append, [0])
        with pytest.raises(itera.UsageError, match="batches is empty"):
            s.run_offline(ran.append, [])
        with pytest.raises(itera.UsageError, match="extra axis 'batch'"):
            s.run_offline(ran.append, [1], axes={"batch": 3})
        with pytest.raises(itera.UsageError, match="not a positive number"):
            s.run_server(ran.append, [0.0])
        with pytest.raises(itera.UsageError, match="requests must be"):
            s.run_single_stream(ran.append, requests=0)
        with pytest.raises(itera.UsageError, match="not callable"):
            s.run_offline("not a function", [1])
        with pytest.raises(itera.UsageError, match="must be a whole number"):
            s.run_offline(ran.append, [1.5])
        with pytest.raises(itera.UsageError, match="min_samples 5 is above"):
            s.run_offline(ran.append, [1], min_samples=5, max_samples=2)
        with s.case({"open": 1}):
            with pytest.raises(itera.UsageError, match="a case is open"):
                s.run_offline(ran.append, [1])
    assert ran == []


def test_the_gil_is_free_while_the_runner_waits():
    # A server request that sleeps lets other Python threads run: the runner never holds the GIL
    # while it waits for arrivals or for other workers.
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        with itera.Session("gil", device="none") as s:
            s.run_server(lambda call: time.sleep(0.002), [100.0], concurrency=[4], requests=30)
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 20
