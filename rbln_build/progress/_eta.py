"""How long a build has left: recorded compile durations, corrected by this run's, spread over its workers.

* ``CompileHistory``: the last durations of each kind of compile (its label without key hashes), in
  ``<build_dir>/progress-history.json``; unreadable means empty; nothing hashed reads it.
* ``TimeLeft``: the time left of the planned work. Each compile still to run is expected to take
  what its kind took before (the median of the history; of the same model on another target when
  the kind is new), times how much slower or faster this run's finished compiles were than their
  history said (an exponential moving average of the ratio); a kind with no history counts the
  median of this run's finished compiles of its kind (else of its model), else the mean of this run's
  finished compiles, else the mean of the known kinds. A running compile needs its
  expected time less what it has spent, and never less than a fifth of what it has spent (or a
  second): an overrun is not "done". The compiles are then spread over the workers (each next one
  to the worker that frees first, running ones first), and the time left is when the last ends.
  After the last compile, each cell left takes the wall time between this run's finished cells. Nothing to
  go on (no history and nothing finished yet) gives no estimate rather than a made-up one, and while
  work remains the estimate is never zero.
"""

from __future__ import annotations

import heapq
import json
import os
import re
import statistics
from collections.abc import Sequence
from pathlib import Path

from .._documents import read_file

__all__ = ["CompileHistory", "TimeLeft", "similar"]

_HASH = re.compile(r"\b[0-9a-f]{8,}\b")


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
                data = json.loads(read_file(path))  # ours in the build dir, but never a FIFO or device read
                self.seconds = {str(k): [float(x) for x in v] for k, v in data["compiles"].items()}
            except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
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


class TimeLeft:
    """The estimate of one run (see the module docstring). Feed it what finished; ask ``seconds``."""

    SMOOTHING = 0.5  # weight of the newest observation in the moving averages
    OVERRUN = 0.2  # a compile past its expected time needs at least this share of what it spent

    def __init__(self, history: CompileHistory) -> None:
        self.history = history
        self.known = dict(history.seconds)  # the history as the run started (record() adds this run's)
        self.ratio: float | None = None  # this run's compiles took ratio x what the history said
        self.observed: list[float] = []  # this run's compile durations
        self.observed_by: dict[str, list[float]] = {}  # ... by similar label
        self.cell_s: float | None = None  # this run's seconds per cell (moving average)

    def _prior(self, label: str) -> float | None:
        times = self.known.get(similar(label))
        if not times:
            model = similar(label).split(" ")[0]
            times = [t for k, v in self.known.items() if k.split(" ")[0] == model for t in v]
        return statistics.median(times) if times else None

    def _smooth(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.SMOOTHING) * old + self.SMOOTHING * new

    def compile_took(self, label: str, seconds: float) -> None:
        prior = self._prior(label)
        if prior is not None and prior > 0 and seconds > 0:
            self.ratio = self._smooth(self.ratio, seconds / prior)
        self.observed.append(seconds)
        self.observed_by.setdefault(similar(label), []).append(seconds)

    def cell_took(self, seconds: float) -> None:
        """Wall seconds from one finished cell to the next, once no compile is left to run."""
        self.cell_s = self._smooth(self.cell_s, max(0.0, seconds))

    def expected(self, label: str) -> float | None:
        prior = self._prior(label)
        if prior is not None:
            return prior * (self.ratio or 1.0)
        kind = similar(label)
        model = kind.split(" ")[0]
        mine = self.observed_by.get(kind) or [
            t for k, v in self.observed_by.items() if k.split(" ")[0] == model for t in v
        ]
        if mine:  # this run's compiles of its kind, else of its model
            return statistics.median(mine)
        if self.observed:
            return statistics.mean(self.observed)
        means = [statistics.median(v) for v in self.known.values() if v]
        return statistics.mean(means) * (self.ratio or 1.0) if means else None

    def seconds(
        self, pending: Sequence[str], running: Sequence[tuple[str, float]], cells_left: int, workers: int
    ) -> float | None:
        """Seconds until ``pending`` compiles (labels, in order), ``running`` ones (label, seconds spent)
        and ``cells_left`` cells are done on ``workers`` workers; None with nothing to go on."""
        if not pending and not running and not cells_left:
            return None
        slots = [0.0] * max(1, workers)
        for label, spent in sorted(running, key=lambda r: -r[1]):
            took = self.expected(label)
            if took is None:
                return None
            left = max(took - spent, self.OVERRUN * spent, 1.0)
            heapq.heapreplace(slots, slots[0] + left)
        for label in pending:
            took = self.expected(label)
            if took is None:
                return None
            heapq.heapreplace(slots, slots[0] + max(took, 0.1))
        total = max(slots)
        if cells_left:
            if self.cell_s is None:
                if not pending and not running:
                    return None
            else:
                total += cells_left * self.cell_s  # wall seconds between cells, workers included
        return max(total, 1.0)
