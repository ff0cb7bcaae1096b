"""What a build shows while it runs: plain lines, or a live display on a terminal.

The build reports events; a ``Progress`` decides how they look::

    progress = make_progress(settings.progress, history=build_dir / HISTORY_FILE)
    progress.plan(compile_labels, len(cells))        # what this run will do
    progress.compile_started(label)
    progress.compile_finished(label, seconds, ok, detail)   # detail: "program" or the error
    progress.cell_finished(cell_id, text, ok)
    progress.compile_cached(label) / progress.cell_cached(cell_id)   # up to date: counted, not shown
    progress.warn(message)
    progress.close()                                  # always (try/finally)

* ``LineProgress``: one plain line per event (``[compile 2/8] ...``, ``[cell 5/18] ...``,
  ``warning: ...``). Used in CI (``CI`` set), when stderr is not a terminal, with ``TERM=dumb``, or
  with ``progress=false``. Event text is stripped of control characters, so logs hold none.
* ``LiveProgress``: permanent lines for finished compiles, failed cells and warnings; below them one
  status line, redrawn in place (and every half second while a compile runs): compiles done/total,
  cells done/total, failures, the running compile with its elapsed time, and the time left,
  estimated from earlier compiles of similar labels recorded in ``<build_dir>/progress-history.json``.

``failure_summary`` groups a run's failed cells by error kind (a count and one example each), for
the end-of-run summary of a big sweep.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "HISTORY_FILE",
    "Progress",
    "LineProgress",
    "LiveProgress",
    "CompileHistory",
    "make_progress",
    "failure_summary",
    "plain",
]

HISTORY_FILE = "progress-history.json"
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b.|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_HASH = re.compile(r"\b[0-9a-f]{8,}\b")


def plain(text: str) -> str:
    """``text`` on one line without control characters (escape sequences removed, tabs and newlines
    become spaces)."""
    return _CONTROL.sub("", text.replace("\n", " ").replace("\t", " ").replace("\r", " "))


def similar(label: str) -> str:
    """What makes two compiles "similar" for the time estimate: the label without key hashes."""
    return " ".join(_HASH.sub("", label).split())


class CompileHistory:
    """Recent compile durations by similar label, in a small JSON file; unreadable means empty."""

    KEEP = 8

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.seconds: dict[str, list[float]] = {}
        if path is not None:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                self.seconds = {str(k): [float(x) for x in v] for k, v in data["compiles"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self.seconds = {}

    def expected(self, label: str) -> float | None:
        """Median of the recorded durations of this label's kind; else of the same model's; else None."""
        times = self.seconds.get(similar(label))
        if not times:
            model = similar(label).split(" ")[0]
            times = [t for k, v in self.seconds.items() if k.split(" ")[0] == model for t in v]
        return statistics.median(times) if times else None

    def record(self, label: str, seconds: float) -> None:
        key = similar(label)
        self.seconds[key] = (self.seconds.get(key, []) + [round(seconds, 3)])[-self.KEEP :]
        if self.path is None:
            return
        body = json.dumps({"schema": 1, "compiles": dict(sorted(self.seconds.items()))}, indent=1) + "\n"
        tmp = self.path.with_name(f".tmp-{self.path.name}-{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(body, encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a lost estimate is not worth failing a build for


class Progress:
    """The event interface, with counts kept for every display. This base shows nothing."""

    def __init__(self, history: CompileHistory | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.history = history or CompileHistory(None)
        self.pending: list[str] = []  # planned compile labels not started yet
        self.compiles_total = self.cells_total = 0
        self.compiles_done = self.cells_done = self.failed = 0
        self.compiles_started = 0
        self.running: list[tuple[str, float]] = []  # (label, start time on self.clock)

    def plan(self, compiles: Sequence[str] | int, cells: int) -> None:
        """Announce this run's work: the compiles it will run (labels, or just how many) and its cells."""
        self.pending = [] if isinstance(compiles, int) else list(compiles)
        self.compiles_total = compiles if isinstance(compiles, int) else len(compiles)
        self.cells_total = cells

    def compile_started(self, label: str) -> None:
        self.compiles_started += 1
        if label in self.pending:
            self.pending.remove(label)
        self.running.append((label, self.clock()))

    def compile_finished(self, label: str, seconds: float, ok: bool, detail: str = "") -> None:
        self.compiles_done += 1
        for i, (name, _) in enumerate(self.running):
            if name == label:
                del self.running[i]
                break
        if ok:
            self.history.record(label, seconds)

    def cell_finished(self, cell_id: str, text: str, ok: bool = True) -> None:
        self.cells_done += 1
        self.failed += 0 if ok else 1

    def compile_cached(self, label: str) -> None:
        """A planned compile that was up to date: done without running."""
        self.compiles_done += 1
        if label in self.pending:
            self.pending.remove(label)

    def cell_cached(self, cell_id: str) -> None:
        self.cells_done += 1

    def warn(self, message: str) -> None:
        pass

    def close(self) -> None:
        pass

    def seconds_left(self) -> float | None:
        """Estimated seconds until the planned compiles are done: each pending or running compile takes
        what its similar label took before (unknown labels: the mean of the known ones), less the time
        a running one has already spent. None with nothing to go on."""
        now = self.clock()
        work = [(label, None) for label in self.pending] + [(label, start) for label, start in self.running]
        expected = {label: self.history.expected(label) for label, _ in work}
        guesses = [v for v in expected.values() if v is not None]
        if not guesses:
            return None
        fill = statistics.mean(guesses)
        left = 0.0
        for label, start in work:
            took = expected[label]
            took = fill if took is None else took
            left += took if start is None else max(0.0, took - (now - start))
        return left


class LineProgress(Progress):
    """One plain line per event: CI logs, pipes, ``progress=false``."""

    def __init__(self, out: TextIO, history: CompileHistory | None = None) -> None:
        super().__init__(history)
        self.out = out

    def _line(self, text: str) -> None:
        print(plain(text), file=self.out, flush=True)

    def _of(self, n: int, total: int) -> str:
        return f"{n}/{total}" if total else str(n)

    def compile_started(self, label: str) -> None:
        super().compile_started(label)
        place = self.compiles_done + len(self.running)  # its place in the plan, up-to-date ones counted
        self._line(f"[compile {self._of(place, self.compiles_total)}] {label} ...")

    def compile_finished(self, label: str, seconds: float, ok: bool, detail: str = "") -> None:
        super().compile_finished(label, seconds, ok, detail)
        what = f"{detail or 'done'} in {seconds:.1f}s" if ok else f"FAILED after {seconds:.1f}s: {detail}"
        self._line(f"[compile {self._of(self.compiles_done, self.compiles_total)}] {label}: {what}")

    def cell_finished(self, cell_id: str, text: str, ok: bool = True) -> None:
        super().cell_finished(cell_id, text, ok)
        self._line(f"[cell {self._of(self.cells_done, self.cells_total)}] {cell_id}: {text}")

    def warn(self, message: str) -> None:
        self._line(f"warning: {message}")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


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
        self.stop = threading.Event()
        self.ticker: threading.Thread | None = None
        self.tick_s = tick_s
        self.started = self.clock()

    def status(self) -> str:
        parts = [f"compiles {self.compiles_done}/{self.compiles_total}", f"cells {self.cells_done}/{self.cells_total}"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        now = self.clock()
        for label, start in self.running[:2]:
            parts.append(f"compiling {label} {_duration(now - start)}")
        left = self.seconds_left()
        if left is not None and (self.running or self.pending):
            parts.append(f"~{_duration(left)} left")
        parts.append(f"elapsed {_duration(now - self.started)}")
        width = shutil.get_terminal_size((100, 24)).columns - 1
        line = " | ".join(parts)
        return line if len(line) <= width else line[: max(0, width - 1)] + "…"

    def _draw(self, permanent: str | None = None) -> None:
        with self.lock:
            text = self.CLEAR
            if permanent is not None:
                text += plain(permanent) + "\n"
            self.out.write(text + self.status())
            self.out.flush()

    def _tick(self) -> None:
        while not self.stop.wait(self.tick_s):
            if self.running:
                self._draw()

    def plan(self, compiles: Sequence[str] | int, cells: int) -> None:
        super().plan(compiles, cells)
        if self.ticker is None:
            self.ticker = threading.Thread(target=self._tick, name="rbln-build-progress", daemon=True)
            self.ticker.start()
        self._draw()

    def compile_started(self, label: str) -> None:
        super().compile_started(label)
        self._draw()

    def compile_finished(self, label: str, seconds: float, ok: bool, detail: str = "") -> None:
        super().compile_finished(label, seconds, ok, detail)
        self._draw(
            f"compiled {label}: {detail or 'done'} in {seconds:.1f}s"
            if ok
            else f"compile FAILED {label} after {seconds:.1f}s: {detail}"
        )

    def cell_finished(self, cell_id: str, text: str, ok: bool = True) -> None:
        super().cell_finished(cell_id, text, ok)
        self._draw(None if ok else f"cell {cell_id}: {text}")

    def compile_cached(self, label: str) -> None:
        super().compile_cached(label)
        self._draw()

    def cell_cached(self, cell_id: str) -> None:
        super().cell_cached(cell_id)
        if self.cells_done % 50 == 0 or self.cells_done == self.cells_total:  # a no-op rebuild stays cheap
            self._draw()

    def warn(self, message: str) -> None:
        self._draw(f"warning: {message}")

    def close(self) -> None:
        self.stop.set()
        if self.ticker is not None:
            self.ticker.join()
        with self.lock:
            self.out.write(self.CLEAR)
            self.out.flush()


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


def failure_summary(
    entries: Sequence[Mapping[str, Any]], failing: Sequence[str] = ("failed", "unexpected_success")
) -> list[str]:
    """Lines grouping the failed manifest entries by error kind, most frequent first: a count and
    the first cell (by id) with its message. Empty when nothing failed."""
    kinds: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        if e["status"] in failing:
            kind = "unexpected_success" if e["status"] == "unexpected_success" else (e.get("error_kind") or "unknown")
            kinds.setdefault(kind, []).append(e)
    if not kinds:
        return []
    total = sum(len(v) for v in kinds.values())
    lines = [f"{total} failed cell(s) by kind:"]
    width = max(len(k) for k in kinds)
    for kind, group in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        first = min(group, key=lambda e: e["cell"])
        lines.append(
            f"  {kind:<{width}}  {len(group):>6,}  e.g. {first['cell']}: {plain(str(first.get('error') or '-'))}"
        )
    return lines
