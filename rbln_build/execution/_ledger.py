"""The single pass: what one run finds in the Store, each thing read and verified once.

    survey(store, cells, read_only=False) -> Ledger

Per compile key, once: does its entry verify (or did it fail for good)? Per cell, once: its stored
result, and whether that result stands (final, and its artifact verifies). Per artifact entry, once,
however many cells share it (many budgets resolve to the same count). The doit tasks' up-to-date
checks, the parallel scheduler, the publish step and the summary of a build all take their answer
from one Ledger; ``rbln-build status`` and ``report`` read the same way (``read_only``: nothing
damaged is removed).

The results index that saves reading 10,000 records is ``_index``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._documents import read_file
from ..store import (
    ENTRY_FILE,
    FILES_DIR,
    CellResult,
    CompileOutcome,
    Store,
    content_hash,
    file_stats,
    is_key,
    meta_hash,
)
from ._index import fingerprint, read_index, read_record

if TYPE_CHECKING:
    from ..config import Cell

__all__ = ["Ledger", "CompileState", "survey", "entry_state"]


@dataclass(frozen=True)
class CompileState:
    """A compile key as the survey found it."""

    entry: str  # "ok" | "missing" | "damaged"
    produced: str | None = None  # the entry's "produced" when ok
    failure: CompileOutcome | None = None  # its recorded failure, when the entry is missing

    @property
    def done(self) -> bool:
        """Nothing to do: the entry verifies, or the key failed for good."""
        return self.entry == "ok" or (self.failure is not None and not self.failure.retry)


@dataclass
class Ledger:
    """One run's view of the Store (see the module docstring)."""

    compiles: dict[str, CompileState] = field(default_factory=dict)  # compile key -> state
    stored: dict[str, CellResult | None] = field(default_factory=dict)  # cell id -> its stored result
    standing: set[str] = field(default_factory=set)  # ids whose stored result stands as is
    # artifact key -> (state, content hash, (compile key, npu, blocks) its entry records)
    artifacts: dict[str, tuple[str, str | None, tuple[Any, ...] | None]] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)  # cell id -> why its record is forged or damaged
    derived: dict[tuple[Any, ...], str] = field(default_factory=dict)  # (compile key, npu, blocks) -> artifact key
    # cell key -> its record file's stat, or the key of the pack its record is in, or None
    fingerprints: dict[str, list[int] | str | None] = field(default_factory=dict)
    indexed: dict[str, dict[str, Any]] = field(default_factory=dict)  # compile key -> the index as read
    from_index: set[str] = field(default_factory=set)  # cell keys whose body the index gave

    def compile_done(self, key: str) -> bool:
        state = self.compiles.get(key)
        return state is not None and state.done

    def artifact_state(self, result: CellResult) -> str:
        """ "ok" | "missing" | "damaged" for an ok result's artifact, as the survey found it."""
        key = result.artifact_key
        if key is None or not is_key(key):
            return "damaged"
        state, recorded, _ = self.artifacts.get(key, ("missing", None, None))
        return state if state != "ok" or recorded == result.artifact_hash else "damaged"

    def stands(self, cell: Cell) -> bool:
        return cell.id in self.standing

    def reusable(self, cell: Cell) -> CellResult | None:
        """The stored result if it stands (what ``_stages.reusable`` answers), else None."""
        return self.stored.get(cell.id) if cell.id in self.standing else None

    def todo(self, cells: Iterable[Cell]) -> list[Cell]:
        return [c for c in cells if c.id not in self.standing]


# -- read-only views of the Store (Store.lookup/load_record remove what is damaged) ----------------


def entry_state(store: Store, kind: str, key: str) -> tuple[str, dict[str, Any] | None]:
    """("ok", meta) | ("missing", None) | ("damaged", None), read-only (unlike Store.lookup)."""
    path = store.entry_path(kind, key)
    try:
        record = json.loads(read_file(path / ENTRY_FILE))
        meta, recorded = record["meta"], record["content_hash"]
        if record.get("key") != key:
            return "damaged", None
    except FileNotFoundError:
        return ("damaged" if path.exists() else "missing"), None
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "damaged", None
    files = path / FILES_DIR
    if file_stats(files) == record.get("stat") and record.get("meta_hash") == meta_hash(meta):
        return "ok", meta
    return ("ok", meta) if content_hash(files, meta) == recorded else ("damaged", None)


# -- the survey -------------------------------------------------------------------------------------


def survey(store: Store, cells: list[Cell], read_only: bool = False) -> Ledger:
    """Read and verify what ``cells`` need from the Store, once (see the module docstring).
    ``read_only``: never remove a damaged entry or record (``status``, ``report``)."""
    ledger = Ledger()
    records = os.path.join(store.root, "results")
    listed = record_files(records, len(cells))
    for cell in cells:
        ckey = cell.compile_key
        if ckey is not None and ckey not in ledger.compiles:
            ledger.compiles[ckey] = _compile_state(store, ckey, read_only)
            ledger.indexed[ckey] = read_index(store, ckey)
        index = ledger.indexed.get(ckey, {}) if ckey is not None else {}
        name = f"{cell.cell_key}.json"
        stat: Any = fingerprint(os.path.join(records, name)) if listed is None or name in listed else None
        hit = index.get(cell.cell_key)
        body: Any = None
        if stat is not None:  # a record file counts over any pack (a cell packed has none)
            if hit is not None and hit[0] == stat:
                body = hit[1]
                ledger.from_index.add(cell.cell_key)
            else:
                body = (
                    read_record(store, "results", cell.cell_key)
                    if read_only
                    else store.load_record("results", cell.cell_key)
                )
        elif hit is not None and isinstance(hit[0], str):  # packed, the pack as indexed (read_index)
            stat, body = hit
            ledger.from_index.add(cell.cell_key)
        else:
            stat, body = store.packed_record(cell.cell_key, read_only)
        ledger.fingerprints[cell.cell_key] = stat
        result, problem = _parse(cell, body, ledger)
        if result is not None and problem is None and result.ok:
            problem = _artifact_problem(store, ledger, cell, result, read_only)
        if problem is not None:  # forged or damaged: never used (as _stages.reusable decides)
            ledger.problems[cell.id] = problem
            result = None
            if not read_only:
                store.warn(
                    f"cache record {_where(store, cell.cell_key, stat)} of cell {cell.id}: {problem}; "
                    "forged or damaged: removed, the cell will be redone"
                )
                store.drop_record("results", cell.cell_key)
        ledger.stored[cell.id] = result
        if result is not None and not result.retry and (not result.ok or _artifact_ok(ledger, result)):
            ledger.standing.add(cell.id)
    return ledger


def record_files(folder: str, cells: int) -> set[str] | None:
    """The names in the results folder, listed once, when that is cheaper than a stat per cell: a
    sweep's cells are packed (no record file), so each stat would fail (10,008 failed stats in a
    fresh 10,008-cell build). None (stat each cell's file) when the folder looks much bigger than
    the run (a cache shared by many build dirs): each directory entry takes 16 bytes of its size or
    more on ext4, xfs, btrfs and tmpfs. A record file made after the listing is not seen: its cell
    is read from its pack or redone, as if the stat had come a moment earlier."""
    try:
        if os.stat(folder).st_size // 16 > 4 * cells + 256:
            return None
        return set(os.listdir(folder))
    except FileNotFoundError:
        return set()
    except OSError:
        return None


def _where(store: Store, cell_key: str, stat: Any) -> str:
    """Where a cell's record was read: its file, or the pack holding it (``store._files``, record packs)."""
    if isinstance(stat, str) and is_key(stat):
        return f"{store.record_path('results', cell_key).name} in {store.pack_path(stat)}"
    return str(store.record_path("results", cell_key))


def _parse(cell: Cell, body: Any, ledger: Ledger) -> tuple[CellResult | None, str | None]:
    """The stored result and why it does not belong to the cell (``_stages.derived_problem``)."""
    from ._stages import derived_problem

    if body is None:
        return None, None
    try:
        result = CellResult.from_json(body)
        return result, derived_problem(cell, result, ledger.derived)
    except (TypeError, ValueError) as exc:
        return None, f"not a cell result ({exc})"


def _artifact_problem(store: Store, ledger: Ledger, cell: Cell, result: CellResult, read_only: bool) -> str | None:
    """Verify the result's artifact entry once per run; a problem when it records another cell's keys."""
    key = result.artifact_key
    assert key is not None and is_key(key)  # derived_problem checked it is the derived key
    known = ledger.artifacts.get(key)
    if known is None:
        if read_only:
            state, meta = entry_state(store, "artifacts", key)
            known = (state, _recorded_hash(store, key) if state == "ok" else None, _triple(meta))
        else:
            entry = store.lookup("artifacts", key)
            known = ("ok", entry.content_hash, _triple(entry.meta)) if entry is not None else ("missing", None, None)
        ledger.artifacts[key] = known
    state, recorded, triple = known
    if (
        state == "ok"
        and recorded == result.artifact_hash
        and triple
        != (
            cell.compile_key,
            cell.npu.name,
            result.kvcache_num_blocks,
        )
    ):
        return f"its artifact {store.entry_path('artifacts', key)} records {triple}, not this cell's"
    return None


def _triple(meta: dict[str, Any] | None) -> tuple[Any, ...] | None:
    if meta is None:
        return None
    return (meta.get("compile_key"), meta.get("npu"), meta.get("kvcache_num_blocks"))


def _artifact_ok(ledger: Ledger, result: CellResult) -> bool:
    state, recorded, _ = ledger.artifacts.get(result.artifact_key or "", ("missing", None, None))
    return state == "ok" and recorded == result.artifact_hash


def _recorded_hash(store: Store, key: str) -> str | None:
    try:
        return json.loads(read_file(store.entry_path("artifacts", key) / ENTRY_FILE))["content_hash"]  # type: ignore[no-any-return]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def _compile_state(store: Store, key: str, read_only: bool) -> CompileState:
    if read_only:
        state, meta = entry_state(store, "compile", key)
    else:
        entry = store.lookup("compile", key)
        state, meta = ("ok", entry.meta) if entry is not None else ("missing", None)
    if state == "ok":
        assert meta is not None
        return CompileState("ok", produced=meta.get("produced"))
    failure = None
    if state == "missing":
        body = read_record(store, "failures", key) if read_only else store.load_record("failures", key)
        try:
            failure = None if body is None else CompileOutcome.from_json(body)
        except (TypeError, ValueError):
            failure = None
    return CompileState(state, failure=failure)
