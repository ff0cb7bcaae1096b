"""The live display: the permanent lines of ``LineProgress``, and under them one status line redrawn
in place (and every half second while a compile runs), when stderr is a terminal.

Counts, percentage and times come first, the running compiles' labels last, so a narrow terminal
cuts the labels, not the numbers. ``make_progress`` chooses: the live display when the ``progress``
setting is on and the output is a terminal outside CI (not ``TERM=dumb``), else plain lines.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from ._eta import CompileHistory
from ._lines import LineProgress, running
from ._progress import Progress, plain

__all__ = ["LiveProgress", "make_progress"]


class LiveProgress(Progress):
    """A status line redrawn in place under the permanent lines (finished compiles, failures, warnings)."""

    CLEAR = "\r\x1b[2K"

    def __init__(
        self,
        out: TextIO,
        history: CompileHistory | None = None,
        tick_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(history, clock)
        self.out = out
        self.lock = threading.RLock()
        self.tick_s = tick_s

    def status(self) -> str:
        line = f"[{_bar(self.percent())}] {self.percent():>3}% | " + " | ".join(self.counts())
        line += running(self.running_parts())
        width = shutil.get_terminal_size((100, 24)).columns - 1
        return line if len(line) <= width else line[: max(0, width - 1)] + "…"

    def _draw(self, permanent: str | None = None, more: Sequence[str] = ()) -> None:
        with self.lock:
            text = self.CLEAR
            if permanent is not None:
                text += plain(permanent) + "\n"
            text += "".join(plain(line) + "\n" for line in more)
            self.out.write(text + self.status())
            self.out.flush()

    def _tick(self) -> None:
        while not self.stop.wait(self.tick_s):
            if self.running:
                self._draw()

    def plan(self, compiles: Sequence[str] | int, cells: int, units: dict[str, float] | None = None) -> None:
        super().plan(compiles, cells, units)
        if self.ticker is None:
            self._start_ticker()
        self._draw()

    def compile_started(self, label: str, key: str | None = None, spent: float = 0.0) -> int:
        with self.lock:
            number = super().compile_started(label, key, spent)
            self._draw()
        return number

    def compile_finished(
        self, label: str, seconds: float, ok: bool, detail: str = "", key: str | None = None, warmup_s: float = 0.0
    ) -> int:
        with self.lock:
            number = super().compile_finished(label, seconds, ok, detail, key, warmup_s)
            self._draw(self.compile_line(number, label, seconds, ok, detail))
        return number

    def cell_finished(self, cell_id: str, text: str, ok: bool = True) -> None:
        with self.lock:
            super().cell_finished(cell_id, text, ok)
            self._draw(None if ok else self.failure_line(cell_id, text))

    def cells_finished(self, done: Sequence[tuple[str, str, bool]]) -> None:
        with self.lock:
            self._draw(None, self._failure_lines(done))

    def compile_cached(self, label: str) -> None:
        with self.lock:
            super().compile_cached(label)
            self._draw()

    def cell_cached(self, cell_id: str) -> None:
        with self.lock:
            super().cell_cached(cell_id)
            if self.cells_done % 50 == 0 or self.cells_done == self.cells_total:  # a no-op rebuild stays cheap
                self._draw()

    def warn(self, message: str) -> None:
        self._draw(f"warning: {message}")

    def close(self) -> None:
        self.finish()
        self.stop.set()
        if self.ticker is not None:
            self.ticker.join()
        with self.lock:
            self.out.write(self.CLEAR)
            self.out.flush()


def _bar(percent: int, width: int = 10) -> str:
    full = percent * width // 100
    return "#" * full + "-" * (width - full)


def make_progress(
    live: bool, out: TextIO | None = None, history: Path | None = None, env: Mapping[str, str] | None = None
) -> Progress:
    """The live display when ``live`` (the ``progress`` setting) and ``out`` is a terminal outside CI;
    otherwise plain lines."""
    out = out or sys.stderr
    env = os.environ if env is None else env
    record = CompileHistory(history)
    is_tty = getattr(out, "isatty", lambda: False)()
    if live and is_tty and not env.get("CI") and env.get("TERM", "") != "dumb":
        return LiveProgress(out, record)
    return LineProgress(out, record)
