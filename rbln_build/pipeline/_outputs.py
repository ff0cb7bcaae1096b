"""Helpers of the publish step (``_tasks.BuildRun._publish``) for a sweep of many cells.

* ``worker_lines``: the manifest lines the workers rendered as they built their cells, checked;
* ``Background``: a function run in a thread of its own while the publish step goes on (the results
  indexes are written while the manifest's links are made: mostly Python work against mostly
  system calls, which let the other thread run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._manifest import render_entry

if TYPE_CHECKING:
    from ..config import Cell
    from ..execution import Parallel
    from ..store import CellResult

__all__ = ["SPOT_CHECK", "worker_lines", "Background"]

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


class Background:
    """``fn(*args)`` in a thread of its own; ``result`` waits for it and returns or raises as it did."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = fn(*args)
            except BaseException as exc:  # handed to the caller of result()
                self._error = exc

        self._thread = threading.Thread(target=run, name="rbln-build-background", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
