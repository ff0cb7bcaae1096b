"""What a build shows while it runs: plain lines, or a live display on a terminal.

The build reports events; a ``Progress`` decides how they look::

    progress = make_progress(settings.progress, history=build_dir / HISTORY_FILE)
    progress.plan(compile_labels, len(cells))        # what this run will do
    progress.use_workers(n)                           # how many compiles can run at once
    progress.compile_started(label, key)              # when a worker starts it (not when it is queued)
    progress.compile_finished(label, seconds, ok, detail, key)   # detail: "program" or the error
    progress.cell_finished(cell_id, text, ok)
    progress.cells_finished([(cell_id, text, ok), ...])   # a worker's batch, shown as one event
    progress.compile_cached(label) / progress.cell_cached(cell_id)   # up to date: counted, not shown
    progress.warn(message)
    progress.close()                                  # always (try/finally)

Each compile gets one number when it starts (``[compile 3/8]``), kept until it finishes. Up-to-date
compiles and cells count as done, so the counters reach N/N.

* ``LineProgress`` (``_lines``, as Bazel's ``--curses=no``): one line per finished compile, per failed cell and
  per warning, and a count line (``[progress 40%] compiles 3/8 ...``) at most every ``every_s``
  seconds while work goes on, and where the run ended (after any other line: whichever event,
  finished or up to date, was the last). Used in CI (``CI`` set), when stderr is
  not a terminal, with ``TERM=dumb``, or with ``progress=false``. Event text is stripped of control
  characters, so logs hold none.
* ``LiveProgress`` (``_live``): the same permanent lines; below them one status line, redrawn in
  place. ``make_progress`` (``_live``) chooses between the two.

The percentage is of the time: elapsed over elapsed plus the time left while there is an estimate
(never lower than it was shown before), else of the compiles and cells of the plan, done or up to
date (a compile and a cell are not the same work: 8 compiles of 2 minutes and 18 cells of
milliseconds counted alike showed 29 % with 6 s to go). The time left is
``_eta.TimeLeft``'s: the work still to do spread over the workers, from the durations of earlier
compiles (``<build_dir>/progress-history.json``) corrected by this run's. What is printed under
the table once the run is over is ``_summary``'s.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from ._eta import CompileHistory, TimeLeft, similar

__all__ = ["HISTORY_FILE", "Progress", "CompileHistory", "duration", "plain", "similar"]

HISTORY_FILE = "progress-history.json"
# Under this many seconds left the display says "finishing", not a number: the truth then is a running
# compile's remainder (past its expected time: unknown) or the run's tail, neither known to 2x.
FINISHING_S = 8.0
FAILURE_LINES = 10  # failed cells shown one line each as they come; the rest only in the end's summary by kind
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b.|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(text: str) -> str:
    """``text`` on one line without control characters (escape sequences removed, tabs and newlines
    become spaces)."""
    return _CONTROL.sub("", text.replace("\n", " ").replace("\t", " ").replace("\r", " "))


def duration(seconds: float) -> str:
    seconds = int(seconds)  # truncated: a shown time never runs ahead of the real one
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """The event interface, with counts kept for every display. This base shows nothing."""

    def __init__(self, history: CompileHistory | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.history = history or CompileHistory(None)
        self.eta = TimeLeft(self.history)
        self.workers = 1
        self.pending: list[str] = []  # planned compile labels not started yet
        self.compiles_total = self.cells_total = 0
        self.compiles_done = self.cells_done = self.failed = 0
        self.compiles_started = 0
        self.running: dict[str, tuple[int, str, float]] = {}  # key -> (number, label, start on self.clock)
        self.early: dict[str, str] = {}  # key -> label: started while every worker looked busy
        self.cold: set[str] = set()  # running keys that are their worker's first program (its warm-up)
        self.warmed = 0  # workers that started a program: the others still have their warm-up to do
        self.shown_percent = 0
        self.started = self.clock()
        self.last_cell: float | None = None
        self.last_compile_end: float | None = None  # when this run's latest compile finished (self.clock)
        self.ticker: threading.Thread | None = None  # a display's thread that redraws or counts (``_tick``)
        self.stop = threading.Event()

    def plan(self, compiles: Sequence[str] | int, cells: int, units: dict[str, float] | None = None) -> None:
        """Announce this run's work: the compiles it will run (labels, or just how many) and its cells;
        ``units``: each label's size relative to others of its kind (for the estimate, ``_eta``)."""
        self.eta.units = dict(units or {})
        self.pending = [] if isinstance(compiles, int) else list(compiles)
        self.compiles_total = compiles if isinstance(compiles, int) else len(compiles)
        self.cells_total = cells

    def use_workers(self, workers: int) -> None:
        self.workers = max(1, workers)

    def compile_started(self, label: str, key: str | None = None, spent: float = 0.0) -> int:
        """A compile began (``spent`` seconds ago); returns its number (0 while it waits for a slot:
        with every worker busy, a start can only be reported before the finish that freed its
        worker, so it is shown from that finish on)."""
        key = key or label
        if key in self.running:
            return self.running[key][0]
        if spent == 0.0 and len(self.running) >= self.workers:
            self.early.setdefault(key, label)
            return 0
        self.early.pop(key, None)
        self.compiles_started += 1
        if label in self.pending:
            self.pending.remove(label)
        self.running[key] = (self.compiles_started, label, self.clock() - spent)
        if self.warmed < self.workers:  # a worker's first compile (a plan too: it may build an inventory)
            self.warmed += 1
            self.cold.add(key)
        return self.compiles_started

    def compile_finished(
        self, label: str, seconds: float, ok: bool, detail: str = "", key: str | None = None, warmup_s: float = 0.0
    ) -> int:
        """A compile ended after ``seconds`` (``warmup_s`` of them its process's warm-up); returns its
        number (given now if its start was not seen)."""
        key = key or label
        was_cold = key in self.cold
        self.cold.discard(key)
        if key in self.running:
            number = self.running.pop(key)[0]
        else:  # its start was not seen (or waits in self.early): numbered now
            self.early.pop(key, None)
            self.compiles_started += 1
            number = self.compiles_started
            if label in self.pending:
                self.pending.remove(label)
        self.compiles_done += 1
        self.last_compile_end = self.clock()
        if ok:
            self.eta.compile_took(label, seconds, warmup_s, cold=warmup_s > 0 or was_cold)
            self.history.record(label, seconds, warmup_s)
        for waiting, waiting_label in list(self.early.items())[: max(0, self.workers - len(self.running))]:
            self.compile_started(waiting_label, waiting)
        return number

    def cell_finished(self, cell_id: str, text: str, ok: bool = True) -> None:
        now = self.clock()
        if self.last_cell is not None and not self.running and not self.pending:
            # between cells after the last compile (a cell before it ended was waiting for it)
            self.eta.cell_took(now - max(self.last_cell, self.last_compile_end or self.last_cell))
        self.last_cell = now
        self.cells_done += 1
        self.failed += 0 if ok else 1

    def cells_finished(self, done: Sequence[tuple[str, str, bool]]) -> None:
        """Several cells finished at once (a batch a worker sent back): ``cell_finished`` for each,
        in order. The displays here take the batch as one event: one write of its failure lines and
        one count line or redraw, not one per cell (a 10,008-cell sweep's batches are ~70 cells)."""
        for cell_id, text, ok in done:
            self.cell_finished(cell_id, text, ok)

    def failure_line(self, cell_id: str, text: str) -> str | None:
        """The line of a failed cell just counted: the first ``FAILURE_LINES`` failures each get one,
        the last of them saying that the others are not listed as they come; after that None. The
        end of the run groups every failure by kind (``failure_summary``): 1,000 failed cells are a
        few lines there, not 1,000 here."""
        if self.failed > FAILURE_LINES:
            return None
        line = f"[cell {self.cells_done}/{self.cells_total}] {cell_id}: {text}"
        if self.failed == FAILURE_LINES:
            line += " (further failed cells are not listed as they come: the end of the run groups them by kind)"
        return line

    def _failure_lines(self, done: Sequence[tuple[str, str, bool]]) -> list[str]:
        """Count ``done`` (as ``cell_finished`` does) and return the line of each failed cell that gets one."""
        lines = []
        for cell_id, text, ok in done:
            Progress.cell_finished(self, cell_id, text, ok)
            line = None if ok else self.failure_line(cell_id, text)
            if line is not None:
                lines.append(line)
        return lines

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
        self.finish()

    def finish(self) -> None:
        """The run is over (each display's ``close`` calls this first): when it compiled something
        and finished every cell, record how long it took after its last compile (its tail)."""
        if self.last_compile_end is not None and self.cells_total and self.cells_done >= self.cells_total:
            self.history.record_tail(self.cells_total, self.clock() - self.last_compile_end)
            self.last_compile_end = None  # once

    @contextlib.contextmanager
    def without_threads(self) -> Iterator[None]:
        """No thread of this display runs inside the block (its ticker stopped, started again after):
        a fork copies only the calling thread, so a lock another thread held would stay locked in the
        child (``_workers.start_method`` forks only in a process with one thread)."""
        ticker = self.ticker
        if ticker is None or not ticker.is_alive():
            yield
            return
        self.stop.set()
        ticker.join()
        try:
            yield
        finally:
            self.stop = threading.Event()
            self._start_ticker()

    def _start_ticker(self) -> None:
        self.ticker = threading.Thread(target=self._tick, name="rbln-build-progress", daemon=True)
        self.ticker.start()

    def _tick(self) -> None:
        """The ticker thread's loop (a display that has one), until ``stop`` is set."""

    # -- what the displays show -----------------------------------------------------------------

    def seconds_left(self) -> float | None:
        """The estimated seconds until the plan is done (``_eta.TimeLeft``); None with nothing to go on."""
        now = self.clock()
        running = [(label, now - start) for _, label, start in self.running.values()]
        cold = ([self.running[k][1] for k in self.cold if k in self.running], self.workers - self.warmed)
        since = None if self.pending or self.running else now - (self.last_compile_end or self.started)
        cells_left = self.cells_total - self.cells_done
        return self.eta.seconds(self.pending, running, cells_left, self.workers, cold, (self.cells_total, since))

    def percent(self) -> int:
        """Of the time while there is an estimate (see the module docstring), else of the counts."""
        total = self.compiles_total + self.cells_total
        done = self.compiles_done + self.cells_done
        if not total or done >= total:
            return 100
        left = self.seconds_left()
        if left is None:
            share = int(100 * done / total)
        else:
            elapsed = self.clock() - self.started
            share = min(99, int(100 * elapsed / (elapsed + left))) if elapsed + left > 0 else 0
        self.shown_percent = max(self.shown_percent, share)
        return self.shown_percent

    def counts(self) -> list[str]:
        """The numbers, most important first: counts, failures, times (no labels)."""
        now = self.clock()
        parts = [f"compiles {self.compiles_done}/{self.compiles_total}", f"cells {self.cells_done}/{self.cells_total}"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        parts.append(f"{duration(now - self.started)} elapsed")
        if self.compiles_done < self.compiles_total or self.cells_done < self.cells_total:
            left = self.seconds_left()
            if left is not None:
                parts.append("finishing" if left < FINISHING_S else f"~{duration(left)} left")
        return parts

    def running_parts(self) -> list[str]:
        """The running compiles, oldest first: number, time spent, then the label."""
        now = self.clock()
        return [
            f"#{n} {duration(now - start)} {label}"
            for n, label, start in sorted(self.running.values(), key=lambda r: r[2])
        ]

    def compile_line(self, number: int, label: str, seconds: float, ok: bool, detail: str) -> str:
        what = f"{detail or 'done'} in {seconds:.1f}s" if ok else f"FAILED after {seconds:.1f}s: {detail}"
        return f"[compile {number}/{self.compiles_total or number}] {label}: {what}"
