"""Stream arguments without PyTorch (itera/_streams.py): None is no stream; the null stream (handle 0:
PyTorch's and CuPy's default stream) is passed as cudaStreamLegacy, never as "no stream"; stream
objects of every kind give their handle; bad ones are refused naming what to pass. test_torch.py times
the default stream on a GPU."""

import numpy as np
import pytest

import itera
from itera import _streams
from conftest import stage_of


class FakeSession:
    """What resolve() reads of a session: its CUDA device (-1: host time only)."""

    def __init__(self, device):
        self.device = device


class TorchLike:  # torch.cuda.Stream / torch.cuda.default_stream(): .cuda_stream
    def __init__(self, handle):
        self.cuda_stream = handle


class ProtocolLike:  # the CUDA stream protocol: __cuda_stream__() -> (version, handle)
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class CupyLike:  # cupy.cuda.Stream: .ptr (Stream.null has 0)
    def __init__(self, handle):
        self.ptr = handle


@pytest.mark.parametrize("make", [int, np.uint64, TorchLike, ProtocolLike, CupyLike])
def test_the_default_stream_0_is_passed_as_cuda_stream_legacy(make):
    on_gpu = FakeSession(0)
    assert _streams.resolve(make(0), on_gpu) == _streams.LEGACY_DEFAULT_STREAM == 1
    assert _streams.resolve(make(0x7f00aa00), on_gpu) == 0x7f00aa00  # any other stream as it is
    assert _streams.resolve(make(2), on_gpu) == _streams.PER_THREAD_DEFAULT_STREAM  # cudaStreamPerThread


def test_none_is_no_stream_and_current_follows_the_session():
    assert _streams.resolve(None, FakeSession(0)) is None
    assert _streams.resolve(None, FakeSession(-1)) is None
    assert _streams.resolve("current", FakeSession(-1)) is None  # host-only: no stream, portable code runs


def test_bad_stream_arguments_name_what_to_pass():
    s = FakeSession(0)
    with pytest.raises(itera.UsageError, match="is not a stream"):
        _streams.resolve(True, s)
    with pytest.raises(itera.UsageError, match="'default' is not a stream"):
        _streams.resolve("default", s)
    with pytest.raises(itera.UsageError, match="a float is not a stream itera knows"):
        _streams.resolve(1.5, s)
    with pytest.raises(itera.UsageError, match="not a cudaStream_t value"):
        _streams.resolve(-1, s)
    with pytest.raises(itera.UsageError, match="not an integer"):
        _streams.resolve(TorchLike("zero"), s)


def test_a_scope_made_with_stream_0_holds_cuda_stream_legacy():
    # What the C++ API is given, seen on the scope: 1, not None (which would be "no stream").
    with itera.Session("streams", device="none") as s:
        if itera.built_with_cuda:
            # A host-only session refuses any stream, the default one included, before CUDA sees it.
            with pytest.raises(itera.UsageError, match="records host time only"):
                with s.stage("x", 0):
                    pass
            s.end_case()
        else:
            st = s.stage("x", TorchLike(0))
            assert st.stream == _streams.LEGACY_DEFAULT_STREAM
            it = s.iteration(0)
            assert it.stream == _streams.LEGACY_DEFAULT_STREAM
            with it:
                with st:
                    pass
            r = s.end_case()
            assert stage_of(r, "x")["device_ns"] == -1
            assert "built without CUDA" in r["details"]["streams"]  # a stream was given, and ignored
        assert s.stage("y").stream is None and s.iteration().stream is None
