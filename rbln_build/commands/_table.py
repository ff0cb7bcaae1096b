"""The results a build prints: the full table of its cells, or, for a big sweep, a summary.

Up to ``FULL_TABLE_MAX`` cells (or with ``--full-table``) the terminal gets one row per cell. Above
it, 10,000 rows would bury what matters, so it gets the counts by status and by what was produced
or why it failed, and the path of ``results.txt``, which always holds the full table of the run.
The failures themselves are grouped by kind on stderr (``_progress.failure_summary``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..reporting import quality_columns

__all__ = ["FULL_TABLE_MAX", "TABLE_FILE", "full_table", "quality_columns", "summary_table"]

FULL_TABLE_MAX = 100  # cells; above it the terminal gets summary_table
TABLE_FILE = "results.txt"  # <build_dir>/results.txt: the full table of the last run


def _budget(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def full_table(entries: Sequence[dict[str, Any]], redone: set[str]) -> str:
    """One row per cell, then one line per failed (or expected-to-fail) cell with its message. A
    matrix with quantized variants gets two more columns beside the blocks (``quality_columns``)."""
    quality = any("quality" in e for e in entries)
    rows = [
        ("cell", "status", "blocks", "full", "floor")
        + (("ppl vs float", "greedy agree") if quality else ())
        + ("budget", "budget bytes", "produced", "this run")
    ]
    for e in entries:
        rows.append(
            (
                e["cell"],
                e["status"],
                "-" if e["kvcache_num_blocks"] is None else str(e["kvcache_num_blocks"]),
                "-" if e["num_full_blocks"] is None else str(e["num_full_blocks"]),
                "-" if e["num_min_blocks"] is None else str(e["num_min_blocks"]),
                *(quality_columns(e) if quality else ()),
                _budget(e["memory_budget"]),
                "-" if e["budget_bytes"] is None else f"{e['budget_bytes']:,}",
                e["produced"] or "-",
                "built" if e["cell"] in redone else "cached",
            )
        )
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    # one format per row (each column left-aligned to its width) rather than a ljust per column
    row_format = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [row_format.format(*r).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for e in entries:
        if e["status"] in ("failed", "unexpected_success", "expected_failure") and e["error"]:
            lines.append(f"{e['cell']} [{e['status']}, {e['error_kind']}]: {e['error']}")
    return "\n".join(lines)


def summary_table(entries: Sequence[dict[str, Any]], redone: set[str], table_path: str | None) -> str:
    """Counts by status, and within each status by what was produced (ok) or the error kind; how
    many were built this run; where the full table is."""
    counts: dict[tuple[str, str], list[int]] = {}
    for e in entries:
        status = e["status"]
        kind = (e["produced"] or "-") if status in ("ok", "unexpected_success") else (e["error_kind"] or "-")
        row = counts.setdefault((status, kind), [0, 0])
        row[0] += 1
        row[1] += e["cell"] in redone
    order = {"ok": 0, "unexpected_success": 1, "failed": 2, "expected_failure": 3}
    rows = [("status", "produced / error kind", "cells", "built", "cached")]
    for (status, kind), (n, built) in sorted(counts.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0])):
        rows.append((status, kind, f"{n:,}", f"{built:,}", f"{n - built:,}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = (False, False, True, True, True)
    lines = [
        "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    where = (
        f"the full table ({len(entries):,} rows) is in {table_path}"
        if table_path is not None
        else "the full table could not be written"
    )
    lines.append(f"{len(entries):,} cells: {where}; rbln-build --full-table prints it here.")
    return "\n".join(lines)
