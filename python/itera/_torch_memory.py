"""PyTorch's caching allocator as itera memory marks, without PyTorch in the core.

When a session records torch memory (``Session(torch_memory=...)``), a stage made with
``memory=True`` records the allocator's peak while it was open (``torch.cuda.max_memory_allocated``,
reset when the stage is entered, the enclosing stages' peaks carried over), and a case begun with
``Session.case`` / ``begin_case`` records the allocator's peak over the case under the mark
``torch.peak``. Each of these reads PyTorch's statistics (tens of microseconds), so plain stages never
do: give ``memory=True`` to the phases worth it (forward, backward, optimizer step).

PyTorch keeps one peak per device, not per thread: stages with memory=True assume one thread drives
the device at a time.
"""

import sys
import threading

from . import _itera

CASE_MARK = "torch.peak"


class TorchMemory:
    def __init__(self, torch, device):
        self._torch = torch
        self._device = device
        self._local = threading.local()
        self._case_peak = 0

    @staticmethod
    def detect(mode, session):
        """The tracker for `session`, or None. mode: "auto", True or False."""
        if mode is False or mode is None:
            return None
        if mode not in ("auto", True):
            raise _itera.UsageError(f"torch_memory={mode!r}: give 'auto', True or False")
        torch = sys.modules.get("torch")
        if mode == "auto":
            if torch is None or session.device < 0 or not torch.cuda.is_available():
                return None
            return TorchMemory(torch, session.device)
        if torch is None:
            try:
                import torch  # noqa: F811 -- asked for explicitly
            except ImportError:
                raise _itera.UsageError("torch_memory=True needs PyTorch, which is not installed: install torch, or "
                                        "open the session with torch_memory=False") from None
        if session.device < 0:
            raise _itera.UsageError(f"torch_memory=True needs a session on a CUDA device; this one records host time "
                                    f"only ({session.host_only_reason})")
        if not torch.cuda.is_available():
            raise _itera.UsageError("torch_memory=True: PyTorch sees no CUDA device (torch.cuda.is_available() is "
                                    "False)")
        return TorchMemory(torch, session.device)

    def allocated(self):
        return int(self._torch.cuda.memory_allocated(self._device))

    def _peak(self):
        return int(self._torch.cuda.max_memory_allocated(self._device))

    def _stack(self):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def begin_case(self):
        self._torch.cuda.reset_peak_memory_stats(self._device)
        self._case_peak = 0

    def case_peak(self):
        return max(self._case_peak, self._peak())

    def enter(self):
        stack = self._stack()
        before = self._peak()
        self._case_peak = max(self._case_peak, before)
        if stack:
            stack[-1] = max(stack[-1], before)
        self._torch.cuda.reset_peak_memory_stats(self._device)
        stack.append(0)

    def cancel(self):
        """Undoes enter() when the scope could not be entered."""
        stack = self._stack()
        if stack:
            stack.pop()

    def exit(self):
        """(peak while the stage was open, bytes allocated now)."""
        stack = self._stack()
        peak = max(stack.pop() if stack else 0, self._peak())
        self._case_peak = max(self._case_peak, peak)
        if stack:
            stack[-1] = max(stack[-1], peak)
        return peak, self.allocated()
