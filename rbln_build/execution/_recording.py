"""Recording a batch of cell results that came back from a worker: one pack per compile key.

The scheduler records what the workers built, from one process (``_jobs.cells_job`` says why). A
record file per cell was 10,008 files for a 10,008-cell sweep; a pack per batch and compile key
(``store._files``, record packs) is about 160.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from ..store import CellResult, Store, render_record
from ._index import remember
from ._stages import record_cell

if TYPE_CHECKING:
    from ..config import Cell

__all__ = ["record_batch"]


def record_batch(
    store: Store, cells: list[Cell], results: list[CellResult], rendered: list[bytes | None], stale: set[str]
) -> list[CellResult]:
    """Record a batch of results (``rendered``: their records' bytes, where a worker rendered them)
    as one pack per compile key (``store._files``, record packs); in a shared cache, a record file per cell as
    before (other build dirs read them). ``stale``: cell keys that had a record file when the run
    began, removed once their new record is packed (the file would count over the pack). A pack
    that cannot be written makes its cells retryable failures, as a record does."""
    if store.owner:
        return [record_cell(store, c, r, d) for c, r, d in zip(cells, results, rendered, strict=True)]
    groups: dict[Any, list[int]] = {}
    for i, cell in enumerate(cells):
        groups.setdefault(cell.compile_key, []).append(i)
    out = list(results)
    for members in groups.values():
        records = []
        for i in members:
            data = rendered[i]
            records.append(
                (cells[i].cell_key, render_record(cells[i].cell_key, results[i].to_json()) if data is None else data)
            )
        try:
            key, stat = store.save_pack(records)
        except OSError as exc:
            for i in members:
                out[i] = results[i].failed(
                    f"cannot record the cell's result in {store.root}: {exc}", "build_failed", True
                )
            continue
        for i in members:
            if stat is not None:
                remember(results[i], key)
            if cells[i].cell_key in stale:
                with contextlib.suppress(OSError):
                    os.unlink(store.record_path("results", cells[i].cell_key))
    return out
