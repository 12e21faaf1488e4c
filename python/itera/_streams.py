"""Stream arguments: what a stage, an iteration or the runner may be given, as a cudaStream_t value.

Accepted: None (host time only), "current" (PyTorch's current stream on the session's device, read
when the scope is entered), a cudaStream_t as an int, or a stream object: PyTorch's
(``.cuda_stream``), one with the CUDA stream protocol (``__cuda_stream__``), or CuPy's (``.ptr``).
PyTorch is never imported here: "current" looks for it among the modules already imported.

The legacy default stream has the handle 0 (``torch.cuda.current_stream().cuda_stream`` is 0 on
PyTorch's default stream), which the C++ API reads as "no stream": it is passed as cudaStreamLegacy
(1), the same stream under the handle CUDA reserves for it.
"""

import sys

from . import _itera

LEGACY_DEFAULT_STREAM = 1  # cudaStreamLegacy

_KINDS = ("None, 'current' (PyTorch's current CUDA stream), a cudaStream_t as an int, or a stream object "
          "(torch.cuda.Stream, an object with __cuda_stream__, a CuPy stream)")


def handle_of(stream):
    """The cudaStream_t value of a stream object or int (0 stays 0)."""
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
        raise _itera.UsageError(f"stream: a {type(stream).__name__} is not a stream itera knows; pass {_KINDS}")
    try:
        handle = int(handle)
    except (TypeError, ValueError):
        raise _itera.UsageError(f"stream: the handle of a {type(stream).__name__} is not an integer; pass {_KINDS}") from None
    if handle < 0 or handle >= 1 << 64:
        raise _itera.UsageError(f"stream: {handle} is not a cudaStream_t value (0 to 2^64-1)")
    return handle


def current_handle(session):
    """PyTorch's current stream on the session's device, or None for a host-only session."""
    if session.device < 0:
        return None  # host time only: the results say why (details.device_time)
    torch = sys.modules.get("torch")
    if torch is None:
        raise _itera.UsageError(
            "stream='current' means PyTorch's current CUDA stream, but torch is not imported: import torch "
            "before entering the scope, or pass the stream itself (a cudaStream_t as an int, or a stream object)")
    return torch.cuda.current_stream(session.device).cuda_stream or LEGACY_DEFAULT_STREAM


def resolve(stream, session):
    """None, or the handle to give the C++ API (never 0)."""
    if stream is None:
        return None
    if isinstance(stream, str):
        if stream != "current":
            raise _itera.UsageError(f"stream: {stream!r} is not a stream; pass {_KINDS}")
        return current_handle(session)
    return handle_of(stream) or LEGACY_DEFAULT_STREAM
