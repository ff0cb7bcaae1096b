"""The doit wiring: one task per compile key, one per compile key's cells, one that publishes.

The tasks only call the stages (``_stages``) and print progress; they hand nothing to each other
except through the Store. Nothing heavy happens while tasks are created (keys come from recipe
bytes, attention arithmetic and package versions), so a no-op rebuild imports neither torch nor
transformers.

What is up to date is decided once per run, before any task, by one pass over the Store
(``_ledger.survey``): each compile key's entry, each cell's stored result and each artifact entry
is read and verified once. Every up-to-date check, the parallel scheduler, the manifest and the summary
take their answer from that Ledger. A sweep of 10,000 cells is 2 doit tasks per compile key, not
10,000 tiny ones (doit's own bookkeeping per task would cost more than the cells). The tasks and
their up-to-date checks are made in ``_doit`` (``task_namespace``).

The content-addressed Store is the ground truth; doit's state (``<build_dir>/.doit.sqlite3``, the
sqlite3 backend) only saves the checks, so a damaged state file is moved aside with a warning and the
run goes on from the Store. A failure never fails a doit task: it is recorded in the Store. If the
outputs (manifest, links, summary) cannot be written, ``output_error`` says why and the CLI reports it.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from ..backends import warm_up
from ..config import CACHE_DIR, Cell, Scale, owner_tag
from ..errors import BuildError
from ..execution import (
    LOG_DIR,
    IndexWhileBuilding,
    Ledger,
    Parallel,
    StoreRef,
    build_cell,
    compile_once,
    describe,
    index_cells,
    show_cell_finished,
    survey,
)
from ..progress import HISTORY_FILE, doit_reporter, make_progress
from ..store import DOWN_MARKER, LOCK_FILE, CellResult, CompileOutcome, Store, once_key
from ._doit import (
    NO_COMPILE,
    TracebackTrap,
    compile_label,
    compile_units,
    display_label,
    doit_config,
    doit_said,
    group_label,
    task_namespace,
)
from ._links import EarlyLinks
from ._manifest import entry_for, manifest_line, run_timings, summarize, timed
from ._outputs import made_entries, worker_lines
from ._publish import ARTIFACTS_DIR, MANIFEST_FILE, SUMMARY_FILE, OutputError, publish, write_summary
from ._startup import INVENTORY_ENV, STATE_FILE, scope_inventory_cache, start_run

__all__ = ["BuildRun", "doit_config", "STATE_FILE", "LOCK_FILE", "INVENTORY_ENV"]


class BuildRun:
    """One run over a list of cells into one build directory: the doit tasks and what the run did
    (for its progress lines and summary only; no stage reads it)."""

    def __init__(
        self,
        build_dir: Path,
        cells: list[Cell],
        progress: bool = True,
        out: TextIO | None = None,
        sections: Callable[[Store, list[tuple[Cell, CellResult | None]]], dict[str, Any]] | None = None,
        scale: Scale | None = None,
        publish: bool = True,
        kept: list[Cell] | None = None,
    ) -> None:
        self.build_dir = Path(build_dir)
        # cells of the declared matrix this (narrowed) run does not build: their entries stay in the
        # manifest while their stored results and artifacts are there (_matrix.declared_cells)
        self.kept = list(kept or [])
        self.sections = sections  # more top-level manifest keys, from the Store and the cells' results
        self.cells = cells
        self.progress = progress
        self.out = out or sys.stderr
        self.warnings: list[str] = []
        # what the run shows: a live status line on a terminal, plain lines otherwise (_progress)
        self.display = make_progress(progress, self.out, history=self.build_dir / HISTORY_FILE)
        self.scale = scale or Scale()
        self.publish = publish  # False: a sweep job of a launcher (the parent publishes the merged manifest)
        self.cache_dir = None if self.scale.cache_dir is None else Path(self.scale.cache_dir)  # shared (_layout)
        owner = "" if self.cache_dir is None else owner_tag(self.build_dir)
        sc = self.scale
        self.ref = StoreRef(str(self.build_dir / CACHE_DIR), sc.remote, sc.require_remote, owner, sc.remote_options)
        self.store: Store = self.ref.open(self._warn)
        self.parallel: Parallel | None = None  # what ran ahead of doit in worker processes / on Ray
        self.early = EarlyLinks(self.build_dir) if publish else None  # links made while the workers build
        self.indexing: IndexWhileBuilding | None = None  # the results indexes, likewise (``run``)
        self.compiles: dict[str, Cell] = {}  # compile key -> the first cell that needs it
        self.groups: dict[str, list[Cell]] = {}  # compile key (or NO_COMPILE) -> its cells, in order
        for cell in cells:
            if cell.compile_key is not None:
                self.compiles.setdefault(cell.compile_key, cell)
            self.groups.setdefault(cell.compile_key or NO_COMPILE, []).append(cell)
        self._ledger: Ledger | None = None  # the run's single pass over the Store (``ledger``)
        self.results: dict[str, CellResult] = {}  # cell id -> the result of a cell redone in this run
        self.compiled: list[str] = []
        self.redone: set[str] = set()
        self.took: dict[str, dict[str, float]] = {"compiles": {}, "cells": {}}  # seconds by key, by cell id
        self.entries: list[dict[str, Any]] | None = None  # the manifest entries (written unless output_error)
        self.output_error: str | None = None  # why the manifest, a link or the summary could not be written
        self.manifest_current = False  # with output_error: only links failed; the manifest names those cells failed

    def _warn(self, message: str) -> None:
        if once_key(message) in {once_key(m) for m in self.warnings}:
            return  # one warning per run, however many workers met it
        self.warnings.append(message)
        self.display.warn(message)

    @property
    def ledger(self) -> Ledger:
        """What the Store holds for this run's cells (and the kept ones), read once: ``prepare`` takes
        it after the start-up's clean-up; ``doit list``/``info`` through dodo.py take it on first use."""
        if self._ledger is None:
            self._ledger = survey(self.store, self.cells + self.kept)
        return self._ledger

    def _reporter(self) -> type:
        compiles = {compile_label(c): (key, display_label(c)) for key, c in self.compiles.items()}
        groups = {group_label(key, cells): [c.id for c in cells] for key, cells in self.groups.items()}
        return doit_reporter(
            self.display, compiles, lambda: None if self.parallel is None else self.parallel.shown, groups
        )

    # -- tasks ------------------------------------------------------------------------------------

    def namespace(self) -> dict[str, Any]:
        """A dodo-like namespace for doit's ModuleTaskLoader (also what dodo.py exports)."""
        return task_namespace(self)

    def _compile(self, key: str) -> None:
        done = None if self.parallel is None else self.parallel.compile_results.get(key)
        if done is not None:  # compiled ahead of doit (shown already)
            if done.fresh:
                self.compiled.append(key)
            return
        cell = self.compiles[key]
        assert cell.spec is not None
        label = display_label(cell)
        if self.ledger.compile_done(key):  # in the Store already (doit's state did not know): counted as done
            self.display.compile_cached(label)
            return
        self.display.compile_started(label, key)
        started = time.perf_counter()
        warm = warm_up(cell.spec)  # imports counted apart from the compile by the time-left estimate
        outcome = compile_once(self.store, key, cell.spec, cell.backend)
        took = self.took["compiles"][key] = time.perf_counter() - started
        finished = functools.partial(self.display.compile_finished, label, took, key=key, warmup_s=warm)
        if isinstance(outcome, CompileOutcome):
            finished(False, outcome.error or "")
            return
        if not outcome.made:  # another build sharing the cache (cache.dir) made it while we waited
            finished(True, f"{outcome.meta['produced']} from the cache")
            return
        self.compiled.append(key)
        finished(True, outcome.meta["produced"])

    def _compile_stands(self, key: str) -> bool:
        return self.ledger.compile_done(key)

    def _group_stands(self, key: str) -> bool:
        ledger = self.ledger
        return all(ledger.stands(cell) for cell in self.groups[key])

    def _group(self, key: str) -> None:
        """Redo the compile key's cells that do not stand (each resolved and finalized once)."""
        ledger = self.ledger
        shown = set() if self.parallel is None else self.parallel.shown
        for cell in self.groups[key]:
            if not ledger.stands(cell):
                self._cell(cell)
            elif cell.id not in shown:  # doit's state did not know it: shown as done, from the cache
                result = ledger.stored.get(cell.id)
                assert result is not None
                self._finished(cell, result)

    def _cell(self, cell: Cell) -> None:
        self.redone.add(cell.id)
        if self.parallel is not None and cell.id in self.parallel.cell_results:
            self.results[cell.id] = self.parallel.cell_results[cell.id]
            return  # built ahead of doit (shown already)
        result, self.took["cells"][cell.id] = timed(build_cell, self.store, cell)
        self.results[cell.id] = result
        self._finished(cell, result)

    def _finished(self, cell: Cell, result: CellResult) -> None:
        show_cell_finished(self.display, cell, result)

    def rows(self, cells: list[Cell]) -> list[tuple[Cell, CellResult | None]]:
        """Each cell with its result: redone in this run, else as the survey found it (None when it
        has none, or its artifact is gone or damaged: the manifest never names a missing artifact)."""
        ledger = self.ledger
        done = {} if self.parallel is None else self.parallel.cell_results
        out: list[tuple[Cell, CellResult | None]] = []
        for cell in cells:
            result = self.results.get(cell.id) or done.get(cell.id)
            if result is None:
                result = ledger.stored.get(cell.id)
                if result is not None and result.ok and not ledger.stands(cell):
                    result = None
            out.append((cell, result))
        return out

    def _publish(self) -> None:
        """Write the manifest and the links. A failure to write them is kept in ``output_error`` (the
        entries are still known, for the report), never raised into doit."""
        if not self.publish:
            return
        # the next run's survey reads the indexes: the ones not written while the workers built are
        # written by the pool's thread while the links are made
        if self.indexing is not None:
            self.indexing.close()
        done = set() if self.indexing is None else self.indexing.written
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rbln-build-index") as background:
            indexing = background.submit(index_cells, self.ledger, self.store, self.cells, done)
            try:
                rows = self.rows(self.cells)
                self.entries = made_entries(self.parallel, rows)
                others = [r for r in self.rows(self.kept) if r[1] is not None]
                publish(
                    self.build_dir,
                    rows + others,
                    None if self.sections is None else self.sections(self.store, rows),
                    entries=self.entries + [entry_for(cell, result) for cell, result in others],
                    warn=self._warn,
                    rendered=worker_lines(self.parallel, rows, self.entries),
                    early=self.early,
                    resections=None if self.sections is None else self._resections(len(rows)),
                )
                indexing.result()
            except OutputError as exc:  # links not written: the manifest (and the summary) count those cells failed
                self.entries = exc.entries[: len(rows)]
                self.manifest_current = True
                self.output_error = f"{MANIFEST_FILE} or {ARTIFACTS_DIR}/: {exc}"
            except Exception as exc:  # OSError, a user's entry in artifacts/ (BuildError), or a bug (logged)
                message = (
                    str(exc)
                    if isinstance(exc, (OSError, BuildError))
                    else describe(exc, self.build_dir / LOG_DIR / "publish.txt")[0]
                )
                self.output_error = f"{MANIFEST_FILE} or {ARTIFACTS_DIR}/: {message}"

    def _resections(self, n: int) -> Callable[[list[tuple[Cell, CellResult | None]]], dict[str, Any]]:
        """The sections again, from this run's ``n`` rows as publish failed them (links not written)."""
        sections, store = self.sections, self.store
        assert sections is not None
        return lambda failed: sections(store, failed[:n])

    # -- a whole run ------------------------------------------------------------------------------

    def run(self, args: list[str] | None = None) -> int:
        """Run doit over the tasks (the caller holds the build lock). Returns doit's exit code."""
        from doit.cmd_base import ModuleTaskLoader
        from doit.doit_cmd import DoitMain

        self.build_dir.mkdir(parents=True, exist_ok=True)
        scope_inventory_cache(self.build_dir)
        self.prepare()
        labels = [display_label(c) for c in self.compiles.values()]
        self.display.plan(labels, len(self.cells), units=compile_units(self.compiles.values()))
        (self.build_dir / "cache" / DOWN_MARKER).unlink(missing_ok=True)  # this run asks the remote afresh
        self.store = self.ref.open(self._warn)
        probe = getattr(self.store, "probe", None)  # a remote cache: reachable? (warns once, or raises)
        if probe is not None and not probe():
            self.ref = replace(self.ref, remote=None)  # workers build with the local cache alone
        if self.publish:
            self.indexing = IndexWhileBuilding(self.ledger, self.store, self.cells)
        # doit prints a traceback when it cannot run (e.g. its state DB on a full disk): that one write
        # goes to logs/ as a warning; everything else written to stderr streams through as it comes.
        stream = TracebackTrap(sys.stderr)
        try:
            self.parallel = Parallel(
                self.store,
                self.ref,
                self.scale,
                self.compiles,
                self.cells,
                self.display,
                display_label,
                self._warn,
                ledger=self.ledger,
                line_of=manifest_line if self.publish else None,
                entry_of=entry_for if self.publish else None,
                recorded=self._recorded,
            )
            self.parallel.run()
            with contextlib.redirect_stderr(stream):
                code = int(DoitMain(ModuleTaskLoader(self.namespace())).run(args or ["run"]))
        finally:
            if self.early is not None:  # waited for by the publish step, unless it never ran
                self.early.close(cancel=True)
            if self.indexing is not None:
                self.indexing.close()
            self.display.close()
        for text in stream.trapped:
            self._warn(doit_said(self.build_dir / LOG_DIR, text))
        self._upload_missing()
        return code

    def _recorded(self, cells: list[Cell], results: list[CellResult]) -> None:
        for hand in (self.early, self.indexing):  # a batch the scheduler recorded: its links and indexes
            if hand is not None:
                hand.add(cells, results)

    def _upload_missing(self) -> None:
        """With a remote cache: upload what this build uses that is local only, and a shard's results
        for the merge (``store._remote_sync``). A remote turned off for the run counts what it left."""
        from ..store import sync_after_build

        cells = [(c.cell_key, c.compile_key) for c in self.cells]
        for line in sync_after_build(self.store, list(self.compiles), cells, self.scale.shard):
            (self._warn if line.startswith("cache.remote:") else self.display.warn)(line)

    def prepare(self) -> None:
        """Before any task (holding the lock): the run's start-up (_startup)."""
        start_run(self.build_dir, self.store, self.display.warn, self._warn, self.cache_dir)
        self._ledger = survey(self.store, self.cells + self.kept)  # after the clean-up: what this run starts from

    def summary(self) -> dict[str, Any]:
        """Write summary.json for this run from the published manifest entries."""
        if self.entries is None:  # doit did not reach the manifest task
            self._publish()
        entries = self.entries or []
        labels = {key: display_label(cell) for key, cell in self.compiles.items()}
        timings = run_timings(self.groups, self.redone, self.took, self.parallel, labels)
        try:
            return write_summary(self.build_dir, entries, len(self.compiled), self.redone, self.warnings, timings)
        except OSError as exc:
            self.output_error = self.output_error or f"{SUMMARY_FILE}: {exc}"
            return summarize(entries, len(self.compiled), self.redone)
