"""With PyTorch: stages on PyTorch's current stream (device time from CUDA events on it, the default
stream included), the allocator's peaks per stage and per case, the runner timing on a stream, and a
stream of another device refused. Skipped without torch; the CUDA ones without a usable GPU (they run
on the GPU host: scripts/device_python.sh)."""

import pytest

torch = pytest.importorskip("torch")

import itera  # noqa: E402
from conftest import metric_of, stage_of  # noqa: E402

MiB = 1 << 20


def test_without_cuda_torch_memory_is_off_and_current_is_no_stream():
    with itera.Session("cpu", device="none") as s:
        assert not s.torch_memory
        with pytest.raises(itera.UsageError, match="torch_memory=True needs a session on a CUDA device"):
            itera.Session("cpu2", device="none", torch_memory=True)
        with s.iteration("current"):
            with s.stage("x", "current"):
                torch.ones(4) + 1
        r = s.end_case()
    assert stage_of(r, "x")["device_ns"] == -1


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch sees no CUDA device")


def matmuls(x, n):
    for _ in range(n):
        x = x @ x
        x = x / x.norm()
    return x


def event_ms(fn, stream=None):
    stream = stream or torch.cuda.current_stream()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return begin.elapsed_time(end)


@pytest.fixture
def gpu_session():
    with itera.Session("torch", device=0) as s:
        assert s.backend == "cuda" and s.device == 0, s.host_only_reason
        yield s


def clock_of(session):
    """The device clock the session chose (device_clock="auto": CUPTI where it can be used)."""
    method = session.context["device"]["stage_clock_method"].split()[0]
    assert method in ("cupti_external_correlation", "cuda_events"), method
    return method


@cuda
def test_a_stage_on_the_current_stream_times_the_device_work(gpu_session):
    s = gpu_session
    x = torch.randn(2048, 2048, device="cuda")
    matmuls(x, 4)
    torch.cuda.synchronize()
    reference_ms = min(event_ms(lambda: matmuls(x, 20)) for _ in range(3))
    stage = s.stage("mm", "current")
    with s.case({"what": "current"}, warmup=1):
        for _ in range(1 + 5):
            with s.iteration("current"):
                with stage:
                    matmuls(x, 20)
    r = s.cases[-1]
    mm = stage_of(r, "mm")
    assert r["status"] == "ok", r["message"]
    assert r["device_time_method"] == clock_of(s)
    assert mm["calls"] == 5 and mm["device_time_method"] != ""
    per_call_ms = mm["device_ns"] / 5 / 1e6
    assert 0.5 * reference_ms < per_call_ms < 2.0 * reference_ms, (per_call_ms, reference_ms)
    assert min(r["samples"]["device_ns"]) / 1e6 > 0.5 * reference_ms


@cuda
def test_the_default_stream_handle_0_is_timed_not_ignored(gpu_session):
    s = gpu_session
    assert torch.cuda.current_stream().cuda_stream == 0, "PyTorch's default stream is the legacy stream"
    x = torch.randn(1024, 1024, device="cuda")
    matmuls(x, 2)
    for stream in (0, torch.cuda.current_stream(), torch.cuda.default_stream()):
        with s.stage("default", stream):
            matmuls(x, 10)
    r = s.end_case()
    assert stage_of(r, "default")["device_ns"] > 0


@cuda
def test_current_is_read_when_entered_so_a_side_stream_is_timed(gpu_session):
    s = gpu_session
    side = torch.cuda.Stream()
    x = torch.randn(2048, 2048, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        matmuls(x, 4)
    side.synchronize()
    reference_ms = min(event_ms(lambda: matmuls(x, 20), side) for _ in range(2))

    @s.stage("on_side", "current")
    def work():
        return matmuls(x, 20)

    with torch.cuda.stream(side):
        work()
    side.synchronize()
    r = s.end_case()
    assert stage_of(r, "on_side")["device_ns"] / 1e6 > 0.5 * reference_ms


@cuda
def test_allocator_peaks_per_stage_and_per_case():
    with itera.Session("mem", device=0, torch_memory=True) as s:
        assert s.torch_memory
        with s.case({"what": "peaks"}) as c:
            s.mark_torch_memory("start")
            with s.stage("outer", "current", memory=True):
                with s.stage("big", "current", memory=True):
                    t = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
                    del t
                with s.stage("small", "current", memory=True):
                    u = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
                    del u
    r = c.record
    base = metric_of(r, "memory/mark/start/allocator")
    assert base is not None
    big = metric_of(r, "memory/mark/big/allocator")
    small = metric_of(r, "memory/mark/small/allocator")
    outer = metric_of(r, "memory/mark/outer/allocator")
    assert big >= base + 256 * MiB
    assert base + 8 * MiB <= small < base + 256 * MiB  # the peak was reset when 'small' was entered
    assert outer >= big  # the enclosing stage keeps the inner stage's peak
    assert metric_of(r, "memory/mark/torch.peak/allocator") >= big
    assert metric_of(r, "memory/measured_peak") >= big
    assert stage_of(r, "outer/big")["memory_peak_bytes"] >= 256 * MiB
    assert stage_of(r, "outer/small")["memory_peak_bytes"] < 256 * MiB
    assert metric_of(r, "memory/device_in_use") > 256 * MiB  # driver view, at the marks


@cuda
def test_a_case_failed_by_an_exception_keeps_its_allocator_peak_and_device_times():
    with itera.Session("fail", device=0, torch_memory=True) as s:
        stage = s.stage("alloc", torch.cuda.default_stream())  # handle 0: timed as cudaStreamLegacy
        with pytest.raises(RuntimeError, match="pretend OOM"):
            with s.case({"what": "oom"}) as c:
                with s.iteration(0):
                    with stage:
                        t = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
                        t.fill_(1)
                        del t
                raise RuntimeError("pretend OOM")
    r = c.record
    assert r["status"] == "failed" and r["message"] == "RuntimeError: pretend OOM"
    assert metric_of(r, "memory/mark/torch.peak/allocator") >= 64 * MiB
    assert stage_of(r, "alloc")["device_ns"] > 0
    assert r["samples"]["device_ns"][0] > 0


@cuda
def test_the_runner_times_each_call_on_the_stream(gpu_session):
    s = gpu_session
    x = torch.randn(1024, 1024, device="cuda")
    matmuls(x, 2)
    summary = s.run_offline(lambda call: matmuls(x, 5 * call.batch), [1, 4], stream="current", min_samples=10,
                            min_time_s=0.02, max_time_s=0.5, warmup_min_count=2, warmup_min_time_s=0)
    one, four = summary.cases
    assert one["device_time_method"] == clock_of(s)
    assert four["stats"]["device"]["median"] > 2 * one["stats"]["device"]["median"]


@cuda
def test_a_stream_of_another_device_is_refused():
    if torch.cuda.device_count() < 2:
        pytest.skip("one CUDA device here: a stream of another device needs two")
    other = torch.cuda.Stream(device=1)
    with itera.Session("two", device=0) as s:
        with pytest.raises(itera.DeviceError, match="belongs to CUDA device 1, but the session records device 0"):
            with s.stage("x", other):
                pass
        with s.stage("fine", torch.cuda.current_stream(0)):
            pass  # what was recorded before and after is kept
        r = s.end_case()
    assert stage_of(r, "fine")["calls"] == 1
