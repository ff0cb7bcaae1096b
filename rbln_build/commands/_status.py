"""``rbln-build status [overrides] [--json]``: what a build would do, and why, without building.

    rbln-build status                    the default matrix (or the project's)
    rbln-build status matrix=release --json

Each cell of the composed matrix gets one state:

    up to date        its result is stored, its artifact verifies, its manifest entry is current
    would compile     its compile key has no cache entry (and no final failure)
    would re-resolve  its compile entry is there but its cell key has no stored result
    would finalize    its result is stored but its artifact is missing or damaged, or the
                      manifest's entry for it is not what the build would publish

and the inputs that changed since the manifest was written (the previous entry of the same cell id,
or, for a new id, the entry that differs from it only in budget or block count): recipe bytes,
weights, build option, budget, device, toolchain version, backend code, estimator code; or a
missing/damaged artifact or cache entry. Cells in the manifest but no longer in the matrix are
listed as ``not in matrix`` (JSON: ``removed``): a build of this matrix would drop them from the
manifest, and ``gc`` keeps them until one does.

Nothing is written, no lock is taken, and neither torch nor transformers is imported: status reads
the Store read-only (a damaged entry is reported, never removed). Exit status: 0 when every cell is
up to date and nothing was removed, 1 otherwise, 2 for a configuration error.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the configuration and pipeline layers are imported when status composes
    from ..config import Cell
    from ..pipeline import Ledger

__all__ = ["CellStatus", "cell_statuses", "changed_inputs", "main", "render"]

UP_TO_DATE, COMPILE, RESOLVE, FINALIZE = "up to date", "would compile", "would re-resolve", "would finalize"


@dataclass
class CellStatus:
    cell: str
    state: str
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, "state": self.state, "reasons": list(self.reasons)}


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) or value is None else repr(value)


def changed_inputs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Readable names of the inputs that differ between two manifest ``inputs`` records."""
    out: list[str] = []
    if old.get("recipe_hash") != new.get("recipe_hash"):
        out.append(f"recipe bytes changed (recipe {new.get('recipe')}: recipe.yaml or config.json)")
    if old.get("weights_hash") != new.get("weights_hash"):
        out.append(f"weights changed (recipe {new.get('recipe')}'s checkpoint)")
    old_opts, new_opts = old.get("build_options") or {}, new.get("build_options") or {}
    for key in sorted(set(old_opts) | set(new_opts)):
        if old_opts.get(key) != new_opts.get(key):
            out.append(f"build option {key} changed: {_show(old_opts.get(key))} -> {_show(new_opts.get(key))}")
    if not any(o.startswith("build option") for o in out) and old.get("attention") != new.get("attention"):
        out.append("build option changed (resolved attention options)")
    for key, label in (
        ("memory_budget", "budget"),
        ("kvcache_num_blocks", "kvcache_num_blocks"),
        ("device", "device"),
        ("npu", "npu"),
        ("num_devices", "num_devices"),
        ("backend", "backend"),
        ("recipe", "recipe"),
    ):
        if old.get(key) != new.get(key) or type(old.get(key)) is not type(new.get(key)):
            out.append(f"{label} changed: {_show(old.get(key))} -> {_show(new.get(key))}")
    old_tc, new_tc = old.get("toolchain"), new.get("toolchain") or {}
    if old_tc is not None:
        for key in sorted(set(old_tc) | set(new_tc)):
            if old_tc.get(key) != new_tc.get(key):
                out.append(f"toolchain version changed: {key} {old_tc.get(key)} -> {new_tc.get(key)}")
    old_code, new_code = old.get("code"), new.get("code") or {}
    if old_code is not None:
        if old_code.get("backend") != new_code.get("backend"):
            out.append(f"backend code changed ({new.get('backend')} backend sources)")
        if old_code.get("estimator") != new_code.get("estimator"):
            out.append("estimator code changed (rbln_build.estimator sources)")
    return out


_CELL_AXES = ("memory_budget", "kvcache_num_blocks")


def _predecessor(inputs: dict[str, Any], old_entries: dict[str, Any], ids: set[str]) -> dict[str, Any] | None:
    """For a new cell id: the old entry that differs from it only in budget or block count (one that
    left the matrix first: that is the one this cell replaces)."""

    def rest(i: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in i.items() if k not in _CELL_AXES}

    mine = rest(inputs)
    entries = sorted(old_entries.values(), key=lambda e: e.get("cell") in ids)
    for entry in entries:
        old = entry.get("inputs") or {}
        if rest(old) == mine:
            return entry  # type: ignore[no-any-return]
    for entry in entries:  # same model and device: still the best explanation
        old = entry.get("inputs") or {}
        if (old.get("model"), old.get("device")) == (inputs["model"], inputs["device"]) and old.get(
            "build_options"
        ) == inputs["build_options"]:
            return entry  # type: ignore[no-any-return]
    return None


def _readable_entry(cid: str, entry: Any) -> bool:
    """Whether a manifest entry has the shape status reads (a damaged one counts as absent)."""
    if not isinstance(entry, dict) or entry.get("cell", cid) != cid:
        return False
    inputs = entry.get("inputs") or {}
    return isinstance(inputs, dict) and all(isinstance(inputs.get(k) or {}, dict) for k in ("toolchain", "code"))


def cell_statuses(build_dir: Path, cells: list[Cell]) -> tuple[list[CellStatus], list[str]]:
    """Every cell's state and reasons, and the ids the manifest has but the matrix no longer does.
    The Store is read once, as a build reads it (``_ledger.survey``), without changing anything."""
    from .._documents import load_json
    from ..errors import UserError
    from ..pipeline import entry_for, survey
    from ..store import Store

    store = Store(build_dir / "cache", warn=lambda message: None)
    try:  # a manifest that is missing or not one this version reads: every cell is new to it
        manifest = load_json(build_dir / "manifest.json")
        old_entries: dict[str, Any] = manifest["cells"]
        if not isinstance(old_entries, dict):
            raise TypeError
        old_entries = {k: v for k, v in old_entries.items() if _readable_entry(k, v)}
    except (UserError, KeyError, TypeError):
        old_entries = {}
    ledger = survey(store, cells, read_only=True)
    links = os.path.join(build_dir, "artifacts")
    ids = {c.id for c in cells}
    out: list[CellStatus] = []
    for cell in cells:
        old = old_entries.get(cell.id)
        state, extra = _state(ledger, cell, old, links, entry_for)
        if state == UP_TO_DATE:
            out.append(CellStatus(cell.id, state))
            continue
        inputs = cell.inputs()
        reasons: list[str] = []
        if old is None:
            pred = _predecessor(inputs, old_entries, ids)
            if pred is None:
                reasons.append("new cell (not in the manifest)")
            else:
                reasons.extend(changed_inputs(pred.get("inputs") or {}, inputs))
                reasons.append(f"new cell id (the manifest has {pred.get('cell')})")
        else:
            reasons.extend(changed_inputs(old.get("inputs") or {}, inputs))
        if not reasons or extra not in reasons:
            reasons.extend([extra] if extra else [])
        out.append(CellStatus(cell.id, state, reasons))
    return out, sorted(cid for cid in old_entries if cid not in ids)


def _state(ledger: Ledger, cell: Cell, old: dict[str, Any] | None, links: str, entry_for: Any) -> tuple[str, str]:
    if cell.compile_key is not None:
        compiled = ledger.compiles[cell.compile_key]
        if compiled.entry != "ok":
            failure = compiled.failure if compiled.entry == "missing" else None
            if failure is None or failure.retry:
                what = (
                    "no compile entry in the cache" if compiled.entry == "missing" else "the compile entry is damaged"
                )
                return (
                    COMPILE,
                    what if failure is None else f"the compile failed before and is retried: {failure.error}",
                )
    problem = ledger.problems.get(cell.id)
    if problem is not None:
        return RESOLVE, f"the stored result is forged or damaged: {problem}"
    result = ledger.stored.get(cell.id)
    if result is None or result.retry:
        return RESOLVE, "no stored result for this cell key" if result is None else f"retried: {result.error}"
    if result.ok:
        state = ledger.artifact_state(result)
        if state != "ok":
            return FINALIZE, f"artifact {state}"
        link = os.path.join(links, cell.id)
        if not os.path.islink(link) or not os.path.exists(link):
            return FINALIZE, f"artifact link artifacts/{cell.id} is missing"
    if old != entry_for(cell, result):
        return FINALIZE, "the manifest entry is not what a build would publish"
    return UP_TO_DATE, ""


OUTSIDE = "not in matrix"  # a cell manifest.json lists that this matrix does not build


def render(statuses: list[CellStatus], removed: list[str], build_dir: Path | str) -> str:
    width = max([len(s.cell) for s in statuses] + [len(c) for c in removed] + [4])
    lines = [f"{'cell'.ljust(width)}  {'state'.ljust(16)}  why", f"{'-' * width}  {'-' * 16}  {'-' * 3}"]
    for s in statuses:
        lines.append(f"{s.cell.ljust(width)}  {s.state.ljust(16)}  {'; '.join(s.reasons)}".rstrip())
    for cid in removed:
        lines.append(
            f"{cid.ljust(width)}  {OUTSIDE.ljust(16)}  manifest.json lists it (a build with other overrides, such "
            "as model=...: `rbln-build status` with those checks it); `rbln-build gc` keeps it until a build of "
            "this matrix drops it from the manifest"
        )
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s.state] = counts.get(s.state, 0) + 1
    parts = [f"{n} {state}" for state, n in sorted(counts.items())] + ([f"{len(removed)} {OUTSIDE}"] if removed else [])
    lines.append(f"{len(statuses)} cells: {', '.join(parts)}. Build dir: {build_dir}")
    return "\n".join(lines)


def show(statuses: list[CellStatus], removed: list[str], build_dir: Path | str, as_json: bool) -> bool:
    """Print the statuses (a table, or JSON); whether everything is up to date and nothing removed."""
    clean = not removed and all(s.state == UP_TO_DATE for s in statuses)
    if as_json:
        print(
            json.dumps(
                {"up_to_date": clean, "cells": [s.to_json() for s in statuses], "removed": removed},
                indent=2,
                sort_keys=True,
            )
        )
    else:
        print(render(statuses, removed, build_dir))
    return clean


def main(argv: list[str]) -> int:
    from ..noop import status_ids

    as_json = "--json" in argv
    args = [a for a in argv if a != "--json"]
    unchanged = status_ids(args)  # the build's no-op stamp of the same arguments holds: all up to date
    if unchanged is not None:
        ids, shown_dir = unchanged
        show([CellStatus(cid, UP_TO_DATE) for cid in ids], [], shown_dir, as_json)
        sys.stdout.flush()
        return 0
    from ..colocation import declared_cells, expand_all
    from ._build import compose

    jobs = compose(args, prog="rbln-build status")
    if jobs is None:
        return 0
    build_dir, cells = expand_all(jobs)
    statuses, removed = cell_statuses(build_dir, cells)
    declared = {c.id for c in declared_cells(jobs, cells)}  # narrowed: the declared matrix's others stay
    removed = [cid for cid in removed if cid not in declared]
    clean = show(statuses, removed, build_dir, as_json)
    sys.stdout.flush()
    return 0 if clean else 1
