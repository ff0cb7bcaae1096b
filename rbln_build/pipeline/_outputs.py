"""Helpers of the publish step (``_tasks.BuildRun._publish``) for a sweep of many cells.

``worker_lines``: the manifest lines the workers rendered as they built their cells, checked.
``made_entries``: the manifest entries the scheduler made as the workers' batches came back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._manifest import entry_for, render_entry

if TYPE_CHECKING:
    from ..config import Cell
    from ..execution import Parallel
    from ..store import CellResult

__all__ = ["SPOT_CHECK", "worker_lines", "made_entries"]

SPOT_CHECK = 32  # one line in this many that the workers rendered is rendered again and compared


def worker_lines(
    parallel: Parallel | None, rows: list[tuple[Cell, CellResult | None]], entries: list[dict[str, Any]]
) -> dict[str, str]:
    """Cell id -> the manifest line a worker rendered (``_manifest.manifest_line``), for the rows
    whose result is the one it rendered the line from (``entries``: the rows' entries, made here).
    A line is the same function of the same cell and result in another process; one line in every
    ``SPOT_CHECK`` is rendered here again and compared, and any difference (say, rbln-build's code
    changed on disk before a spawned worker started) drops them all: this process then renders every
    line itself."""
    if parallel is None or not parallel.lines:
        return {}
    made, lines = parallel.cell_results, parallel.lines
    out = {
        cell.id: lines[cell.id]
        for cell, result in rows
        if cell.id in lines and result is not None and result is made.get(cell.id)
    }
    checked = [entry for (cell, _), entry in zip(rows, entries, strict=True) if cell.id in out][::SPOT_CHECK]
    if any(out[entry["cell"]] != render_entry(entry) for entry in checked):
        return {}
    return out


def made_entries(parallel: Parallel | None, rows: list[tuple[Cell, CellResult | None]]) -> list[dict[str, Any]]:
    """The rows' manifest entries: the one the scheduler made as the cell's batch came back
    (``Parallel.entries``, ``entry_for`` of the same cell and result object) where the row's result
    is that one, else made now. An entry is a function of the cell and its result alone."""
    made = parallel.cell_results if parallel is not None else {}
    early = parallel.entries if parallel is not None else {}
    out = []
    for cell, result in rows:
        entry = early.get(cell.id) if result is not None and result is made.get(cell.id) else None
        out.append(entry if entry is not None else entry_for(cell, result))
    return out
