"""Plain lines: one per finished compile, per failed cell and per warning, and a rate-limited count
line (CI logs, pipes, ``progress=false``; ``_progress`` says when each is written)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ._eta import CompileHistory
from ._progress import Progress, plain

__all__ = ["LineProgress", "running"]


class LineProgress(Progress):
    """Plain lines: CI logs, pipes, ``progress=false`` (see the module docstring)."""

    def __init__(
        self,
        out: TextIO,
        history: CompileHistory | None = None,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(history, clock)
        self.out = out
        self.every_s = every_s
        self.lock = threading.RLock()
        self.said_at = self.clock()
        self.said: tuple[Any, ...] = ()
        self.spoke = False  # a line was printed: the log then ends with a count line of where it ended

    def _line(self, text: str) -> None:
        self._lines([text])

    def _lines(self, texts: Sequence[str]) -> None:
        with self.lock:
            self.spoke = True
            print("\n".join(plain(text) for text in texts), file=self.out, flush=True)

    def _state(self) -> tuple[Any, ...]:
        return (self.compiles_done, self.cells_done, self.failed, tuple(self.running))

    def _counts(self, force: bool = False) -> None:
        """The count line, rate-limited: at most every ``every_s``, and only when a count changed."""
        with self.lock:
            now = self._state()
            quiet = self.clock() - self.said_at
            if not force and (
                quiet < self.every_s or (now == self.said and not (self.running and quiet >= 6 * self.every_s))
            ):
                return  # a running compile's time is repeated at most every 6 x every_s
            self.said, self.said_at = now, self.clock()
            self._line(f"[progress {self.percent()}%] " + " | ".join(self.counts()) + running(self.running_parts()))

    def _tick(self) -> None:
        while not self.stop.wait(min(1.0, self.every_s)):
            self._counts()

    def plan(self, compiles: Sequence[str] | int, cells: int, units: dict[str, float] | None = None) -> None:
        super().plan(compiles, cells, units)
        if self.ticker is None and (self.compiles_total or self.cells_total):
            self._start_ticker()

    def compile_finished(
        self, label: str, seconds: float, ok: bool, detail: str = "", key: str | None = None, warmup_s: float = 0.0
    ) -> int:
        with self.lock:
            number = super().compile_finished(label, seconds, ok, detail, key, warmup_s)
            self._line(self.compile_line(number, label, seconds, ok, detail))
        return number

    def cell_finished(self, cell_id: str, text: str, ok: bool = True) -> None:
        with self.lock:
            super().cell_finished(cell_id, text, ok)
            line = None if ok else self.failure_line(cell_id, text)
            if line is not None:
                self._line(line)
            self._counts(force=self.cells_done == self.cells_total)

    def cells_finished(self, done: Sequence[tuple[str, str, bool]]) -> None:
        with self.lock:
            lines = self._failure_lines(done)
            if lines:
                self._lines(lines)
            self._counts(force=self.cells_done == self.cells_total)

    def warn(self, message: str) -> None:
        self._line(f"warning: {message}")

    def close(self) -> None:
        self.finish()
        self.stop.set()
        if self.ticker is not None:
            self.ticker.join()
            stopped = self.cells_done < self.cells_total or self.compiles_done < self.compiles_total
            if (self.spoke or stopped) and self._state() != self.said:  # where it ended or stopped, once
                self._counts(force=True)


def running(parts: list[str]) -> str:
    """The running compiles' part of a count or status line (empty when none runs)."""
    return (" | running " + ", ".join(parts)) if parts else ""
