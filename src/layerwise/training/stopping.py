"""A graceful stop: SIGTERM, a first Ctrl-C or a time limit ends training at the next optimizer step, with a
checkpoint to resume from (a second Ctrl-C interrupts at once)."""
from __future__ import annotations

import re
import signal
import threading
import time
from contextlib import contextmanager
from types import FrameType
from typing import Iterator

from layerwise.errors import LayerwiseError

EXIT_STOPPED = 4  # a time limit ended the run before its last step; signals exit 128 + their number
SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C"}
_LIMIT: list[tuple[float, str] | None] = [None]  # (time.monotonic() to stop by, its name), set by time_limit()
DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


class TrainingStopped(LayerwiseError):
    """Training was asked to stop and did, after saving a checkpoint at `step`."""

    def __init__(self, step: int, total: int, reason: str, checkpoint: object, exit_code: int) -> None:
        self.where = f"at step {step} of {total} ({reason}); checkpoint saved in {checkpoint}"
        super().__init__(f"stopped {self.where}")
        self.step, self.total, self.reason, self.checkpoint, self.exit_code = step, total, reason, checkpoint, exit_code


def parse_duration(text: str) -> float:
    """Seconds of a duration written as hours, minutes and seconds with their units: 90m, 2h, 1h30m, 45s."""
    match = DURATION.fullmatch(text.strip().lower())
    if not text.strip() or not match or not any(match.groups()):
        raise ValueError("expected a duration with units, such as 45m, 2h or 1h30m")
    hours, minutes, seconds = (float(part or 0) for part in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ValueError("expected a duration above zero")
    return total


@contextmanager
def time_limit(seconds: float | None, label: str = "time limit") -> Iterator[float | None]:
    """Within the block, training stops (with a checkpoint) once `seconds` from now have passed; yields that
    time.monotonic() deadline (None without a limit)."""
    saved = _LIMIT[0]
    deadline = None if seconds is None else time.monotonic() + seconds
    if deadline is not None:
        _LIMIT[0] = (deadline, label)
    try:
        yield deadline
    finally:
        _LIMIT[0] = saved


class StopRequest:
    """While active, records SIGTERM and a first Ctrl-C instead of dying; `reason()` says why to stop, if at all."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._saved: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
            for signum in SIGNAL_NAMES:
                self._saved[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        self._saved.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signum is not None:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without the checkpoint
        self.signum = signum

    def reason(self) -> str:
        """Why training should stop now ('' to go on)."""
        if self.signum is not None:
            return SIGNAL_NAMES[self.signum]
        limit = _LIMIT[0]
        return limit[1] if limit is not None and time.monotonic() >= limit[0] else ""

    def exit_code(self) -> int:
        return 128 + int(self.signum) if self.signum is not None else EXIT_STOPPED
