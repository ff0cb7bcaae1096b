"""How long a build has left: recorded compile durations, corrected by this run's, spread over its workers.

* ``CompileHistory``: the last durations of each kind of compile (its label without key hashes), and
  the last warm-ups (a fresh process importing torch and transformers before its first program), and
  the last tails (how long a run took after its last compile, for how many cells), in
  ``<build_dir>/progress-history.json``; unreadable (or of another schema: schema 1's durations
  held the warm-up) means empty; nothing hashed reads it.
* ``TimeLeft``: the time left of the planned work. Each compile still to run is expected to take
  what its kind took before (the median of the history; of the same model on another target when
  the kind is new), times how much slower or faster this run's finished compiles were than their
  history said (an exponential moving average of the ratio). A kind with no history (a fresh build
  dir) counts, in order: the median of this run's finished compiles of its kind, else of its model;
  else this run's compiles of what it produces (``(torch)``, ``(rbln)``, ``(plan)``: the label's end)
  scaled by its size (``units``: a fixed part and one per layer, ``pipeline.compile_units``); else, for
  a plan, ``PLAN_S`` (plans compute the memory model only); else the mean of this run's finished
  compiles, else of the known kinds. Compile times are counted without their warm-up (the imports
  of a process's first compile, measured apart: ``backends.warm_up``): a compile that runs (or
  will run) first in a worker that has not warmed up is expected to take the median warm-up more. A running compile needs its
  expected time less what it has spent, and never less than a fifth of what it has spent compiling
  (its warm-up apart) or a second: an overrun is not "done". The compiles are then spread over the workers (each next one
  to the worker that frees first, running ones first), and the time left is when the last ends.
  After the last compile the run still finalizes cells, writes the manifest and links the artifacts:
  its tail, ``tail``, expected from the recorded tails (a fixed part and a part per cell), else
  ``TAIL_FIXED_S`` + ``TAIL_CELL_S`` per cell (measured: ``bench/eta.py``), counted after the
  compiles' end and, once they are over, less the time since the last one (never less than the
  cells left at the wall time between this run's finished cells). Nothing to go on (no history and
  nothing finished yet) gives no estimate rather than a made-up one, and while work remains the
  estimate is never zero. The display says ``finishing`` rather than a number under ``FINISHING_S``
  (``_progress``): in the last seconds the truth is one compile's remainder or the tail, which no
  estimate here knows to 2x.
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
_PRODUCES = re.compile(r"\((\w+)\)$")


def produces(label: str) -> str:
    """What a compile makes, from its label's end: ``torch``, ``rbln``, ``plan`` ('' when unsaid)."""
    match = _PRODUCES.search(label)
    return match.group(1) if match else ""


def similar(label: str) -> str:
    """What makes two compiles "similar" for the time estimate: the label without key hashes."""
    return " ".join(_HASH.sub("", label).split())


class CompileHistory:
    """Recent compile durations by similar label, in a small JSON file; unreadable means empty."""

    KEEP = 8
    SCHEMA = 2  # durations without the warm-up, and the warm-ups apart; another schema reads as empty

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.seconds: dict[str, list[float]] = {}
        self.warmups: list[float] = []
        self.tails: list[tuple[int, float]] = []  # (cells, seconds after the last compile) of recent runs
        if path is not None:
            try:
                data = json.loads(read_file(path))  # ours in the build dir, but never a FIFO or device read
                if data.get("schema") != self.SCHEMA:  # schema 1's durations held each worker's warm-up
                    raise ValueError(f"progress history of schema {data.get('schema')!r}")
                self.seconds = {str(k): [float(x) for x in v] for k, v in data["compiles"].items()}
                self.warmups = [float(x) for x in data.get("warmups", [])][-self.KEEP :]
                self.tails = [(int(c), float(t)) for c, t in data.get("tails", [])][-self.KEEP :]
            except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
                self.seconds, self.warmups, self.tails = {}, [], []

    def expected(self, label: str) -> float | None:
        """Median of the recorded durations of this label's kind; else of the same model's; else None."""
        times = self.seconds.get(similar(label))
        if not times:
            model = similar(label).split(" ")[0]
            times = [t for k, v in self.seconds.items() if k.split(" ")[0] == model for t in v]
        return statistics.median(times) if times else None

    def record(self, label: str, seconds: float, warmup_s: float = 0.0) -> None:
        """A compile of ``label`` took ``seconds``, of which ``warmup_s`` were its process's warm-up."""
        key = similar(label)
        self.seconds[key] = (self.seconds.get(key, []) + [round(max(0.0, seconds - warmup_s), 3)])[-self.KEEP :]
        if warmup_s > 0:
            self.warmups = (self.warmups + [round(warmup_s, 3)])[-self.KEEP :]
        self._write()

    def record_tail(self, cells: int, seconds: float) -> None:
        """A run of ``cells`` cells took ``seconds`` after its last compile (cells, manifest, links)."""
        self.tails = (self.tails + [(cells, round(max(0.0, seconds), 3))])[-self.KEEP :]
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        data = {
            "schema": self.SCHEMA,
            "compiles": dict(sorted(self.seconds.items())),
            "warmups": self.warmups,
            "tails": [list(t) for t in self.tails],
        }
        body = json.dumps(data, indent=1) + "\n"
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
    PLAN_S = 0.1  # a plan's compile before any was measured (0.0-0.1 s each on the default matrix)
    TAIL_FIXED_S = 2.3  # after the last compile, before any tail was recorded: a fixed part ...
    TAIL_CELL_S = 0.0003  # ... and one per cell (bench/eta.py: 2.29 s for 18 cells, 2.87 s for 2,000)

    def __init__(self, history: CompileHistory) -> None:
        self.history = history
        self.known = dict(history.seconds)  # the history as the run started (record() adds this run's)
        self.warmups = list(history.warmups)  # the warm-ups recorded, then this run's
        self.units: dict[str, float] = {}  # label -> its size relative to others of its kind (``plan``)
        self.ratio: float | None = None  # this run's compiles took ratio x what the history said
        self.observed: list[float] = []  # this run's compile durations
        self.observed_by: dict[str, list[float]] = {}  # ... by similar label
        self.cell_s: float | None = None  # this run's seconds per cell (moving average)
        self.tails = list(history.tails)  # recorded tails (cells, seconds), as the run started

    def _prior(self, label: str) -> float | None:
        times = self.known.get(similar(label))
        if not times:
            model = similar(label).split(" ")[0]
            times = [t for k, v in self.known.items() if k.split(" ")[0] == model for t in v]
        return statistics.median(times) if times else None

    def _smooth(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.SMOOTHING) * old + self.SMOOTHING * new

    def warmup(self) -> float:
        """What a process's warm-up is expected to take (0 before any was measured)."""
        return statistics.median(self.warmups) if self.warmups else 0.0

    def compile_took(self, label: str, seconds: float, warmup_s: float = 0.0, cold: bool = False) -> None:
        """A compile finished after ``seconds``, ``warmup_s`` of them its process's warm-up; ``cold``:
        its worker's first (its warm-up, even 0 s, is one more observation of what a warm-up takes)."""
        if warmup_s > 0 or cold:
            self.warmups.append(warmup_s)
        seconds = max(0.0, seconds - warmup_s)
        prior = self._prior(label)
        if prior is not None and prior > 0 and seconds > 0:
            self.ratio = self._smooth(self.ratio, seconds / prior)
        self.observed.append(seconds)
        self.observed_by.setdefault(similar(label), []).append(seconds)

    def tail(self, cells: int) -> float:
        """Seconds a run of ``cells`` cells takes after its last compile: the recorded tails' fixed
        part and their median seconds per cell beyond it, else the priors."""
        if not self.tails:
            return self.TAIL_FIXED_S + self.TAIL_CELL_S * cells
        fixed = min(self.TAIL_FIXED_S, min(t for _, t in self.tails))
        per_cell = statistics.median(max(0.0, t - fixed) / max(1, c) for c, t in self.tails)
        return fixed + per_cell * cells

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
        scaled = self._by_size(label)
        if scaled is not None:
            return scaled
        if produces(label) == "plan":
            return self.PLAN_S
        if self.observed:
            return statistics.mean(self.observed)
        means = [statistics.median(v) for v in self.known.values() if v]
        return statistics.mean(means) * (self.ratio or 1.0) if means else None

    def _by_size(self, label: str) -> float | None:
        """This run's seconds per unit of size of the compiles that produce what ``label`` does,
        times ``label``'s size; None when none finished or a size is unknown."""
        kind, size = produces(label), self.units.get(label)
        rates = [
            t / self.units[k]
            for k, times in self.observed_by.items()
            if produces(k) == kind and self.units.get(k)
            for t in times
        ]
        return statistics.median(rates) * size if rates and kind and size else None

    def seconds(
        self,
        pending: Sequence[str],
        running: Sequence[tuple[str, float]],
        cells_left: int,
        workers: int,
        cold: tuple[Sequence[str], int] = ((), 0),
        tail: tuple[int, float | None] = (0, None),
    ) -> float | None:
        """Seconds until ``pending`` compiles (labels, in order), ``running`` ones (label, seconds spent)
        and ``cells_left`` cells are done on ``workers`` workers; None with nothing to go on. ``cold``:
        the running labels that are their worker's first program, and how many more workers have not
        warmed up (the next that many pending programs pay the warm-up). ``tail``: the run's cells
        and the seconds since its last compile ended (None while compiles are pending or running)."""
        if (not pending and not running and not cells_left) or (not self.known and not self.observed):
            return None  # nothing to do, or nothing to go on: no history and nothing finished in this run
        slots = [0.0] * max(1, workers)
        cold_running, cold_left = list(cold[0]), cold[1]
        for label, spent in sorted(running, key=lambda r: -r[1]):
            took = self.expected(label)
            if took is None:
                return None
            compiling = spent  # of what it spent, the compile's share (the overrun is of that)
            if label in cold_running:  # its worker's warm-up first, then the compile
                cold_running.remove(label)
                took, compiling = took + self.warmup(), max(0.0, spent - self.warmup())
            left = max(took - spent, self.OVERRUN * compiling, 1.0)
            heapq.heapreplace(slots, slots[0] + left)
        for label in pending:
            took = self.expected(label)
            if took is None:
                return None
            if cold_left > 0:
                cold_left -= 1
                took += self.warmup()
            heapq.heapreplace(slots, slots[0] + max(took, 0.1))
        total = max(slots) if pending or running else 0.0
        cells, since = tail
        after = self.tail(cells) - (since or 0.0)  # the run's tail, less what of it has passed
        if cells_left and self.cell_s is not None and not pending and not running:
            after = max(after, cells_left * self.cell_s)  # wall seconds between cells, workers included
        return max(total + max(after, 0.0), 1.0)
