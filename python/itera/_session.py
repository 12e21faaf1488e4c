"""Session, stages, cases and the runner from Python (docs/python.md).

The measuring is the C++ user API's (docs/user-api.md); this module gives it Python's shapes:
context managers and decorators for stages and iterations, cases as ``with`` blocks, streams resolved
from PyTorch or any stream object, PyTorch allocator peaks, and the runner with a Python callable.
"""

import dataclasses
import functools
import operator
import os
import threading

from . import _itera, _streams
from ._torch_memory import CASE_MARK, TorchMemory

UsageError = _itera.UsageError
StageError = _itera.StageError

# Sessions entered with `with`, innermost last: what itera.stage() / itera.iteration() record into.
_active = []
_active_lock = threading.Lock()
_lazy_lock = threading.Lock()  # LazyScope's slot (uncontended but for threads sharing one object)


def current_session():
    """The innermost session entered with ``with Session(...)``, or None."""
    with _active_lock:
        return _active[-1] if _active else None


class CallbackError(_itera.Error):
    """The runner's callback raised (or misused a stage) in at least one case. Every case was still
    run and written, the failed ones with what they measured; ``summary`` holds them all and
    ``__cause__`` is the first exception the callback raised."""

    def __init__(self, message, summary):
        super().__init__(message)
        self.summary = summary


@dataclasses.dataclass
class RunSummary:
    """What a runner call recorded: its cases (as the results file holds them), in the order run."""
    cases: list
    failed: int
    first_failure: str


def _axis_list(axes, what="axes"):
    if axes is None:
        return []
    if isinstance(axes, dict):
        items = list(axes.items())
    else:
        try:
            items = [tuple(pair) for pair in axes]
        except TypeError:
            raise UsageError(f"{what}: give a dict {{name: value}} or a list of (name, value) pairs") from None
        if any(len(pair) != 2 for pair in items):
            raise UsageError(f"{what}: give a dict {{name: value}} or a list of (name, value) pairs")
    return [(str(k), str(v)) for k, v in items]


def _integer(name, value):
    """An int (or anything with __index__, such as a NumPy integer), never a bool."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise UsageError(f"{name} must be a whole number, got {value!r}")


def _whole(name, value, minimum):
    number = _integer(name, value) if not isinstance(value, bool) else None
    if number is None or number < minimum:
        raise UsageError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return number


def _seconds(name, value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a number of seconds, got {value!r}") from None
    return value


def _decorate(make, fn):
    """A function that runs inside a fresh scope from make() at each call."""
    if not callable(fn):
        raise UsageError(f"a stage decorates a function; got a {type(fn).__name__}")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        scope = make()
        if scope is None:
            return fn(*args, **kwargs)
        with scope:
            return fn(*args, **kwargs)

    return wrapper


def _scope_call(self, fn):
    session, name, stream, iteration = self.session, self.name, self.stream, self.is_iteration
    return _decorate(lambda: session.make_iteration(stream) if iteration else session.make_stage(name, stream), fn)


# A C++ scope decorates too: @session.stage("decode") makes a fresh stage of that name at each call.
_itera.Scope.__call__ = _scope_call


class MemoryStage:
    """A stage that also records memory: on exit, the PyTorch allocator's peak while it was open (when
    the session records torch memory), the device memory in use (driver view) and the host's resident
    set, under a memory mark named after the stage (memory/mark/<name>/...)."""

    __slots__ = ("_session", "_scope", "_torch")

    def __init__(self, session, scope, torch):
        self._session = session
        self._scope = scope
        self._torch = torch

    def enter(self):
        if self._torch is not None and not self._scope.is_open:
            self._torch.enter()
            try:
                self._scope.enter()
            except BaseException:
                self._torch.cancel()
                raise
        else:
            self._scope.enter()  # already open: the C++ API says so
        return self

    def exit(self):
        if not self._scope.is_open:
            self._scope.exit()  # raises StageError: exited twice / before entering
        try:
            if self._torch is not None:
                peak, now = self._torch.exit()
                self._session._mark_memory(self._scope.name, peak)  # inside the stage: its peak
                self._session._mark_memory(self._scope.name, now)   # bytes in use from now on
            else:
                self._session._mark_memory(self._scope.name, -1)
        finally:
            self._scope.exit()

    def __enter__(self):
        return self.enter()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.exit()
        else:
            try:
                self.exit()
            except StageError:
                pass  # never hide the exception on its way out; the case fails with the reason
        return False

    def __call__(self, fn):
        session, name, stream = self._session, self._scope.name, self._scope.stream
        return _decorate(lambda: session._memory_stage(session.make_stage(name, stream)), fn)

    is_open = property(lambda self: self._scope.is_open)
    is_iteration = property(lambda self: False)
    name = property(lambda self: self._scope.name)
    stream = property(lambda self: self._scope.stream)
    session = property(lambda self: self._session)

    def __repr__(self):
        return f"<itera stage '{self.name}' with memory{', open' if self.is_open else ''}>"


class LazyScope:
    """A stage or iteration made afresh each time it is entered: for the module-level itera.stage /
    itera.iteration (into the current session; nothing when there is none) and for
    stream='current' (PyTorch's current stream when entered). Context manager and decorator; one
    object may be entered by several threads, or nested in itself, at once."""

    __slots__ = ("_session", "_name", "_stream", "_memory", "_iteration", "_held", "_spilled", "_local")

    _EMPTY = object()

    def __init__(self, session, name, stream, memory, iteration):
        self._session = session
        self._name = name
        self._stream = stream
        self._memory = memory
        self._iteration = iteration
        self._held = LazyScope._EMPTY  # the scope entered, while one is (the usual, single use)
        self._spilled = False          # entered again while held: the others go on a per-thread stack
        self._local = None

    def _make(self):
        session = self._session
        if session is None:
            try:
                session = _active[-1]  # current_session() without the lock: one read, atomic
            except IndexError:
                return None
        if self._iteration:
            return session.iteration(self._stream, _fresh=True)
        if self._stream is None and not self._memory:
            return session.make_stage(self._name)
        return session.stage(self._name, self._stream, memory=self._memory, _fresh=True)

    def __enter__(self):
        scope = self._make()
        if scope is not None:
            scope.__enter__()
        with _lazy_lock:
            if self._held is LazyScope._EMPTY and not self._spilled:
                self._held = scope
                return scope
            if not self._spilled:
                self._local = threading.local()
                self._spilled = True
        try:
            self._local.stack.append(scope)
        except AttributeError:
            self._local.stack = [scope]
        return scope

    def __exit__(self, exc_type, exc, tb):
        stack = getattr(self._local, "stack", None) if self._spilled else None
        if stack:
            scope = stack.pop()
        else:
            with _lazy_lock:
                scope, self._held = self._held, LazyScope._EMPTY
            if scope is LazyScope._EMPTY:
                raise StageError(f"{self!r} exited before it was entered")
        if scope is not None:
            return scope.__exit__(exc_type, exc, tb)
        return False

    def __call__(self, fn):
        return _decorate(self._make, fn)

    def __repr__(self):
        what = "iteration" if self._iteration else f"stage '{self._name}'"
        return f"<itera {what}, made when entered>"


def failure_reason(exc):
    """The failed case's message for an exception: "<ExceptionType>: <message>" (the type alone when
    the message is empty), the message cut to 200 characters ("..." then) and kept on one line. The
    runner's callbacks are described the same way. R18: the message is the program's own text."""
    return _itera._exception_reason(exc)


class Case:
    """``with session.case(...)``: begins a case on entry, ends it on exit; ``record`` then holds it.
    If the block raises, the case is ended with ``Session.fail_case``: written with status "failed"
    and the message "<ExceptionType>: <message>" (failure_reason), keeping what it measured but no
    statistics, so that it is never compared with a complete run by mistake; the exception goes on."""

    def __init__(self, session, axes, warmup, fields):
        self._session = session
        self._axes = axes
        self._warmup = warmup
        self._fields = fields
        self.record = None

    def __enter__(self):
        self._session.begin_case(self._axes, self._warmup)
        for k, v in (self._fields or {}).items():
            self._session.set_case_field(str(k), str(v))
        return self

    def __exit__(self, exc_type, exc, tb):
        session = self._session
        if exc_type is not None:
            # Never hide the exception on its way out: a case the block already ended, or a failed
            # write, leaves the record as the session has it.
            if session.case_open:
                try:
                    self.record = session.fail_case(failure_reason(exc))
                except Exception:  # noqa: BLE001 - the block's exception is the one to raise
                    pass
            if self.record is None and session.cases:
                self.record = session.cases[-1]
            return False
        try:
            self.record = session.end_case()
        except StageError:
            cases = session.cases
            self.record = cases[-1] if cases else None
            raise
        return False


class Session(_itera._Session):
    """One results file (or, with results_path None, cases kept in memory): see docs/python.md.

    name          the workload name in the results (a label of your choosing)
    results_path  a new file (an existing one is refused, never overwritten); None keeps the cases
                  in memory only (``cases``); "-" writes to stdout
    device        "auto" (CUDA device 0 when usable, else host time only, with the reason),
                  "none" (host time only) or a CUDA device index
    version       workload_version: bump it when the measured code changes meaning
    fields        recipe fields of every case (model, precision.weights, ...)
    label         the context's `command` ("" by default; the process's argv is never read)
    torch_memory  "auto" (when PyTorch is imported and the session is on a CUDA device), True or
                  False: record PyTorch's allocator peaks in cases and in stages made with memory=True
    device_clock  "auto" (CUPTI activity records when the process can use CUPTI, else CUDA events),
                  "cupti" or "events": how stages given a stream take their device time
                  (docs/user-api.md, "Device clocks")
    """

    def __init__(self, name, results_path=None, *, device="auto", version=1, fields=None, label="",
                 torch_memory="auto", device_clock="auto"):
        if device == "auto":
            index = _itera.device_auto
        elif device == "none" or device is None:
            index = _itera.device_none
        elif isinstance(device, int) and not isinstance(device, bool) and device >= 0:
            index = device
        else:
            raise UsageError(f"device={device!r}: give 'auto', 'none' or a CUDA device index (0, 1, ...)")
        path = "" if results_path is None else os.fspath(results_path)
        if results_path is not None and path == "":
            raise UsageError("results_path is empty: give a file name, or None to keep the cases in memory")
        version = _integer("version", version)
        field_map = {str(k): str(v) for k, v in (fields or {}).items()}
        super().__init__(str(name), path, index, version, field_map, str(label), str(device_clock))
        self._results_path = path or None
        self._closed = False
        self._case_begun = False
        try:
            self._torch = TorchMemory.detect(torch_memory, self)
        except BaseException:
            # Refused: leave nothing behind, so that the same call can be made again once fixed.
            self._closed = True
            self._close()
            if path and path != "-":
                try:
                    os.remove(path)  # written by this call: the context line alone
                except OSError:
                    pass
            raise

    # ---- what it is
    @property
    def results_path(self):
        return self._results_path

    @property
    def closed(self):
        return self._closed

    # case_open (a property of the C++ session): True while a case is open, begun by begin_case /
    # case(), or by a stage, iteration, count or mark outside one.

    @property
    def torch_memory(self):
        """True when cases and memory stages record PyTorch's allocator."""
        return self._torch is not None

    def __repr__(self):
        where = self._results_path or "memory"
        return f"<itera.Session {self.backend} -> {where}{' closed' if self._closed else ''}>"

    # ---- scopes
    def stage(self, name, stream=None, *, memory=False, _fresh=False):
        """A stage, not entered yet: ``with session.stage("decode"):`` enters and exits it, and
        ``@session.stage("decode")`` times every call of a function. Create a stage once and enter it
        many times where the loop is hot. stream: see docs/python.md (None, "current", an int handle,
        a stream object). memory=True also records memory on exit (MemoryStage)."""
        if stream is None and not memory:
            return self.make_stage(name)  # the common case, kept short
        if isinstance(stream, str) and stream == "current" and not _fresh:
            return LazyScope(self, name, stream, memory, False)
        scope = self.make_stage(name, _streams.resolve(stream, self))
        return self._memory_stage(scope) if memory else scope

    def iteration(self, stream=None, *, _fresh=False):
        """An iteration (one sample of the case), not entered yet: ``with session.iteration():``."""
        if stream is None:
            return self.make_iteration()
        if isinstance(stream, str) and stream == "current" and not _fresh:
            return LazyScope(self, "iteration", stream, False, True)
        return self.make_iteration(_streams.resolve(stream, self))

    def _memory_stage(self, scope):
        return MemoryStage(self, scope, self._torch)

    # ---- cases
    def begin_case(self, axes=None, warmup=0):
        """Starts a case: its axes ({name: value} or (name, value) pairs, in order) and how many
        iterations at its start are warm-up."""
        self._begin_case(_axis_list(axes), _whole("warmup", warmup, 0))
        self._case_begun = True
        if self._torch is not None:
            self._torch.begin_case()

    def end_case(self):
        """Ends the open case, writes it and returns it as the results file holds it (a dict). A
        stage still open fails the case, which is written with what it measured; StageError then."""
        if self._torch is not None and self._case_begun:
            self._mark_memory(CASE_MARK, self._torch.case_peak())
        self._case_begun = False
        return self._end_case()

    def fail_case(self, reason):
        """Ends the open case as failed on purpose and returns it: written with status "failed" and
        `reason` (your own text: what went wrong; no data) as its message, keeping what it measured
        but no statistics or rates. A stage still open is closed and named after the reason (no
        StageError: the case is failed already). UsageError when no case is open or the reason is
        empty. ``with session.case():`` calls it when its block raises."""
        if self._torch is not None and self._case_begun and self.case_open:
            self._mark_memory(CASE_MARK, self._torch.case_peak())
        self._case_begun = False
        return self._fail_case(str(reason))

    def case(self, axes=None, *, warmup=0, fields=None):
        """``with session.case({"batch": 8}, warmup=2) as c:`` ... ``c.record`` after the block."""
        return Case(self, axes, warmup, fields)

    # ---- counts and memory
    def mark_memory(self, label, user_bytes=None):
        """Memory now under `label`: device memory in use (driver view), the host's resident set, and
        `user_bytes` when given (an allocator's count, e.g. torch.cuda.memory_allocated())."""
        if user_bytes is None:
            user_bytes = -1
        else:
            user_bytes = _whole(f"memory mark '{label}': user_bytes", user_bytes, 0)
        self._mark_memory(label, user_bytes)

    def mark_torch_memory(self, label):
        """A memory mark with PyTorch's allocated bytes now (torch.cuda.memory_allocated)."""
        if self._torch is None:
            raise UsageError("this session does not record PyTorch memory: open it with torch_memory=True (PyTorch "
                             "with CUDA, a session on a CUDA device)")
        self._mark_memory(label, self._torch.allocated())

    # ---- closing
    def close(self):
        """Ends the open case (when it recorded anything) and closes the file. Idempotent."""
        if self._closed:
            return
        try:
            if self._torch is not None and self._case_begun:
                self._mark_memory(CASE_MARK, self._torch.case_peak())
        finally:
            self._case_begun = False
            self._closed = True
            self._close()

    def __enter__(self):
        with _active_lock:
            _active.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        with _active_lock:
            for i in range(len(_active) - 1, -1, -1):
                if _active[i] is self:
                    del _active[i]
                    break
        if exc_type is not None and not self._closed and self.case_open:
            # The block raised with a case open: that case did not run to its end.
            try:
                self.fail_case(failure_reason(exc))
            except Exception:  # noqa: BLE001 - the block's exception is the one to raise
                pass
        try:
            self.close()
        except StageError:
            if exc_type is None:
                raise
        return False

    # ---- the runner
    def _finish_run(self, result, raise_on_failure):
        summary, first_error, interrupt = result
        out = RunSummary(summary["cases"], summary["failed"], summary["first_failure"])
        if interrupt is not None:
            raise interrupt
        if out.failed and raise_on_failure:
            error = CallbackError(f"{out.failed} of {len(out.cases)} case(s) failed; the first: {out.first_failure} "
                                  f"(every case was written, the failed ones with what they measured)", out)
            if first_error is not None:
                raise error from first_error
            raise error
        return out

    def run_offline(self, fn, batches, *, axes=None, stream=None, warmup_min_count=3, warmup_min_time_s=0.05,
                    min_samples=10, max_samples=100000, min_time_s=0.5, max_time_s=10.0, noise_target=0.005,
                    raise_on_failure=True):
        """One case per batch size: warm-up calls, then calls of `fn(call)` until the stopping rule
        holds; each call is one sample (its device time on `stream` when given) and counts its batch
        as items. Returns a RunSummary; raises CallbackError after the run when a case failed."""
        if isinstance(batches, int):
            batches = [batches]
        batch_list = [_integer("batch size", b) for b in batches]
        result = _itera._run_offline(
            self, fn, batch_list, _axis_list(axes), _streams.resolve(stream, self),
            _whole("warmup_min_count", warmup_min_count, 0), _seconds("warmup_min_time_s", warmup_min_time_s),
            _whole("min_samples", min_samples, 0), _whole("max_samples", max_samples, 0),
            _seconds("min_time_s", min_time_s), _seconds("max_time_s", max_time_s),
            _seconds("noise_target", noise_target))
        return self._finish_run(result, raise_on_failure)

    def run_server(self, fn, rates, *, concurrency=(1,), requests=200, seed=1, ttft_s=0.0, tpot_s=0.0, e2e_s=0.0,
                   warmup_requests=1, axes=None, stream=None, raise_on_failure=True):
        """Poisson arrivals at each rate (requests/s), up to `concurrency` requests in flight (worker
        threads); latency from each request's scheduled arrival. One case per (concurrency, rate)."""
        if isinstance(rates, (int, float)):
            rates = [rates]
        if isinstance(concurrency, int):
            concurrency = [concurrency]
        result = _itera._run_server(
            self, fn, [_seconds("rate", r) for r in rates], [_integer("concurrency", k) for k in concurrency],
            _whole("requests", requests, 1), _whole("seed", seed, 0), _seconds("ttft_s", ttft_s),
            _seconds("tpot_s", tpot_s), _seconds("e2e_s", e2e_s), _whole("warmup_requests", warmup_requests, 0),
            _axis_list(axes), _streams.resolve(stream, self))
        return self._finish_run(result, raise_on_failure)

    def run_single_stream(self, fn, *, requests=100, ttft_s=0.0, tpot_s=0.0, e2e_s=0.0, warmup_requests=1,
                          axes=None, stream=None, raise_on_failure=True):
        """One request at a time, the next issued when the last completes; one case."""
        result = _itera._run_single_stream(
            self, fn, _whole("requests", requests, 1), _seconds("ttft_s", ttft_s), _seconds("tpot_s", tpot_s),
            _seconds("e2e_s", e2e_s), _whole("warmup_requests", warmup_requests, 0), _axis_list(axes),
            _streams.resolve(stream, self))
        return self._finish_run(result, raise_on_failure)


def stage(name, stream=None, *, memory=False):
    """A stage of the current session (the innermost ``with Session(...)``), made when entered:
    ``with itera.stage("decode"):`` or ``@itera.stage("decode")``. Without a current session the
    block or function runs unrecorded."""
    return LazyScope(None, name, stream, memory, False)


def iteration(stream=None):
    """An iteration of the current session, made when entered (see stage())."""
    return LazyScope(None, "iteration", stream, False, True)
