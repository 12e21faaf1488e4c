"""Stream arguments: what a stage, an iteration or the runner may be given, as the cudaStream_t value
the C++ API takes.

    None                    no stream: host time only ("no device time"), on any session
    "current"               PyTorch's current stream on the session's device, read when the scope is
                            entered; on a host-only session, no stream (so the same code runs on a
                            CPU machine). PyTorch is never imported here: "current" looks for it
                            among the modules already imported.
    an int                  a cudaStream_t's value (NumPy integers too)
    a stream object         PyTorch's (``.cuda_stream``), one with the CUDA stream protocol
                            (``__cuda_stream__``), or CuPy's (``.ptr``)

The default stream. PyTorch's default stream (``torch.cuda.default_stream()``, and
``current_stream()`` outside any ``torch.cuda.stream(...)`` block) has the handle 0, and so have
CuPy's ``Stream.null`` and CUDA's own "null stream": the legacy default stream of the current
device. The C++ API reads a null handle as "no stream", so a handle 0 is passed as
``cudaStreamLegacy`` (1), the handle CUDA reserves for that same stream: stream 0 is timed, never
silently taken for "no device time". ``cudaStreamPerThread`` (2) is passed as it is. From C or C++
the program passes ``cudaStreamLegacy`` itself (docs/user-api.md). A stream, the default one
included, given to a session that records host time only is refused by the C++ API (UsageError) in a
build with CUDA, and recorded as ignored in one without.
"""

import operator
import sys

from . import _itera

NULL_STREAM = 0            # the null stream's handle: CUDA's, PyTorch's and CuPy's default stream
LEGACY_DEFAULT_STREAM = 1  # cudaStreamLegacy: the same stream, under a handle that is not null
PER_THREAD_DEFAULT_STREAM = 2  # cudaStreamPerThread

_KINDS = ("None, 'current' (PyTorch's current CUDA stream), a cudaStream_t as an int, or a stream object "
          "(torch.cuda.Stream, an object with __cuda_stream__, a CuPy stream)")


def handle_of(stream):
    """The cudaStream_t value of a stream object or an int, as it is (0 stays 0)."""
    if isinstance(stream, bool):
        raise _itera.UsageError(f"stream: {stream!r} is not a stream; pass {_KINDS}")
    if isinstance(stream, int):
        handle = stream
    elif hasattr(stream, "__cuda_stream__"):
        protocol = stream.__cuda_stream__()
        handle = protocol[1] if isinstance(protocol, tuple) else protocol
    elif hasattr(stream, "cuda_stream"):
        handle = stream.cuda_stream
    elif hasattr(stream, "ptr"):
        handle = stream.ptr
    else:
        try:
            handle = operator.index(stream)  # int, NumPy integer
        except TypeError:
            raise _itera.UsageError(
                f"stream: a {type(stream).__name__} is not a stream itera knows; pass {_KINDS}") from None
    try:
        handle = int(handle)
    except (TypeError, ValueError):
        raise _itera.UsageError(f"stream: the handle of a {type(stream).__name__} is not an integer; pass {_KINDS}") from None
    if handle < 0 or handle >= 1 << 64:
        raise _itera.UsageError(f"stream: {handle} is not a cudaStream_t value (0 to 2^64-1)")
    return handle


def api_handle(handle):
    """The handle to give the C++ API for a cudaStream_t value: the null stream (0), which the C++ API
    would read as "no stream", becomes cudaStreamLegacy, the same stream; any other value is kept."""
    return LEGACY_DEFAULT_STREAM if handle == NULL_STREAM else handle


def current_handle(session):
    """PyTorch's current stream on the session's device (never 0), or None for a host-only session."""
    if session.device < 0:
        return None  # host time only: the results say why (details.device_time)
    torch = sys.modules.get("torch")
    if torch is None:
        raise _itera.UsageError(
            "stream='current' means PyTorch's current CUDA stream, but torch is not imported: import torch "
            "before entering the scope, or pass the stream itself (a cudaStream_t as an int, or a stream object)")
    return api_handle(torch.cuda.current_stream(session.device).cuda_stream)


def resolve(stream, session):
    """None (no stream: host time only), or the handle to give the C++ API, never 0 (see above)."""
    if stream is None:
        return None
    if isinstance(stream, str):
        if stream != "current":
            raise _itera.UsageError(f"stream: {stream!r} is not a stream; pass {_KINDS}")
        return current_handle(session)
    return api_handle(handle_of(stream))
