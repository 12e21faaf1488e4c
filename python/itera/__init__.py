"""itera from Python: profile your own application with itera's measurement core.

    import itera
    with itera.Session("app", "run.jsonl") as s:
        with s.case({"batch": 8}, warmup=2):
            for _ in range(10):
                with s.iteration("current"):
                    with s.stage("forward", "current", memory=True):
                        model(x)
                    s.count("items", 8)

The results file is the one the built-in workloads write: `itera report run.jsonl` reads it.
docs/python.md is the guide; docs/user-api.md defines every figure. Nothing here reads tensors,
prompts, images or file names: the results hold the labels you pass and the measurements (R18).
"""

from . import _itera
from ._itera import (Call, Counter, DeviceError, Error, InputError, Scope, StageError, UsageError, WriteError,
                     build_info)
from ._session import (CallbackError, Case, LazyScope, MemoryStage, RunSummary, Session, current_session, iteration,
                       stage)

__version__ = _itera.__version__
built_with_cuda = bool(build_info["cuda_enabled"])

__all__ = [
    "Call", "CallbackError", "Case", "Counter", "DeviceError", "Error", "InputError", "LazyScope", "MemoryStage",
    "RunSummary", "Scope", "Session", "StageError", "UsageError", "WriteError", "build_info", "built_with_cuda",
    "current_session", "iteration", "stage",
]
