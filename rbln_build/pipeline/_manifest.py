"""The manifest (``<build_dir>/manifest.json``) and the run summary (``<build_dir>/summary.json``).

The manifest is deterministic JSON (sorted keys, one line per cell, no timestamps, paths relative to
the build directory): two clean builds of one matrix give byte-identical files. One entry per cell::

    {"schema_version": 1,
     "cells": {"<cell id>": {
        "cell": "<cell id>", "inputs": {...model, recipe, recipe_hash, device, npu, num_devices,
                                        backend, build_options, attention, memory_budget,
                                        kvcache_num_blocks},
        "compile_key": "...", "cell_key": "...",
        "memory_budget": <as given: null | 0.3 | 1 | "10GB" | "50%">,
        "budget_bytes": <per device, resolved>, "kvcache_num_blocks": N,
        "num_full_blocks": F, "num_min_blocks": M,
        "budget_for_floor": {...}, "budget_for_full_pool": {...},
        "produced": "program" | "plan" | null,
        "artifact": {"path": "artifacts/<cell id>", "content_hash": "sha256:..."} | null,
        "status": "ok" | "failed" | "expected_failure" | "unexpected_success",
        "error": null | "<exact message>", "error_kind": null | "<kind>",
        "expected_failure": null | {"kind": ..., "message": ...}, "warnings": [...],
        "serving": null | {the vllm-rbln flags that agree with the artifact: _serving.serving_for}}}}

A run (or a whole multirun sweep, whose jobs are built together) writes the entries of its cells.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from ..config import Cell
from ..store import CellResult
from ._serving import serving_for

__all__ = [
    "SCHEMA_VERSION",
    "entry_for",
    "render_entry",
    "manifest_line",
    "render_manifest",
    "summarize",
    "render_json",
    "FAILING_STATUSES",
    "NOT_BUILT",
]

SCHEMA_VERSION = 1
FAILING_STATUSES = ("failed", "unexpected_success")


def render_json(value: Any) -> bytes:
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def status_of(cell: Cell, result: CellResult | None) -> str:
    raw = "failed" if result is None or not result.ok else "ok"
    if cell.expected is None:
        return raw
    if raw == "ok":
        return "unexpected_success"
    if result is None:  # not built at all: that is not the failure the matrix declared
        return "failed"
    return "expected_failure" if cell.expected.matches(result.error_kind, result.error) else "failed"


NOT_BUILT = "the cell was not built (its compile failed or the run stopped)"


def entry_for(cell: Cell, result: CellResult | None, inputs: Any = None) -> dict[str, Any]:
    """The cell's manifest entry. ``inputs``: what stands for ``cell.inputs()`` (``manifest_line``)."""
    r = result or CellResult(cell.cell_key, cell.compile_key, error=NOT_BUILT, error_kind="not_built", retry=True)
    status = status_of(cell, result)
    artifact = None
    if r.artifact_hash and status in ("ok", "unexpected_success"):
        artifact = {"path": f"artifacts/{cell.id}", "content_hash": r.artifact_hash}
    error = r.error
    if status == "unexpected_success":
        error = (
            f"expected to fail with {cell.expected.kind!r} (matrix.expect_failure) but it built; "  # type: ignore[union-attr]
            "update the matrix"
        )
    elif status == "failed" and cell.expected is not None and result is not None:
        error = f"{r.error} [expected {cell.expected.kind!r}" + (
            f" with message {cell.expected.message!r}]" if cell.expected.message else "]"
        )
    return {
        "cell": cell.id,
        "inputs": cell.inputs() if inputs is None else inputs,
        "compile_key": cell.compile_key,
        "cell_key": cell.cell_key,
        "memory_budget": cell.memory_budget,
        "budget_bytes": r.budget_bytes,
        "kvcache_num_blocks": r.kvcache_num_blocks,
        "num_full_blocks": r.num_full_blocks,
        "num_min_blocks": r.num_min_blocks,
        "budget_for_floor": r.budget_for_floor,
        "budget_for_full_pool": r.budget_for_full_pool,
        "produced": r.produced,
        "artifact": artifact,
        "status": status,
        "error": error,
        "error_kind": r.error_kind,
        "expected_failure": None
        if cell.expected is None
        else {"kind": cell.expected.kind, "message": cell.expected.message},
        "warnings": list(r.warnings),
        "serving": serving_for(cell, result) if artifact is not None else None,
        **({} if r.quality is None else {"quality": r.quality}),  # a quantized variant's figures
    }


# ``json.dumps`` with these options, without building an encoder per call (``store.canonical_json``)
_LINE = json.JSONEncoder(sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))


def render_entry(entry: Any) -> str:
    """One cell's entry as its manifest line holds it (after the cell id)."""
    return _LINE.encode(entry)


def manifest_line(cell: Cell, result: CellResult) -> str:
    """``render_entry(entry_for(cell, result))``: what a worker renders for the cells it builds
    (``execution.cells_job``), so that publishing a sweep joins lines instead of rendering them.

    A cell's inputs are 40% of its line and the same for every budget of a sweep: they are rendered
    once per ``Cell.inputs_key`` (with a hole where the budget goes), and the line with a hole where
    they go. A JSON object with sorted keys renders as each value rendered in its place, so the bytes
    are the same (tests/test_manifest.py compares them; the scheduler also renders one line in 32
    again and compares, ``_outputs.worker_lines``). Measured over 2,000 cells in one process, 15
    rounds: 27.9 us a line at best before, 22.6 us after."""
    try:
        parts = _INPUTS_TEXT.get(cell.inputs_key())
    except TypeError:  # an option value that is not hashable: no memo
        return render_entry(entry_for(cell, result))
    if parts is None:
        parts = _inputs_parts(cell)
    before, hole, after = render_entry(entry_for(cell, result, inputs=_HOLE)).partition(_HOLE_JSON)
    if parts[1] is None or not hole or _HOLE_JSON in after:  # the hole's text elsewhere too: no memo
        return render_entry(entry_for(cell, result))
    return before + parts[0] + render_entry(cell.memory_budget) + parts[1] + after


_HOLE = "\x00rbln-build hole\x00"  # a string no manifest value holds (where one does, no memo)
_HOLE_JSON = json.dumps(_HOLE)
# Cell.inputs_key -> its inputs' JSON before and after the budget's (None after: no hole found)
_INPUTS_TEXT: dict[tuple[Any, ...], tuple[str, str | None]] = {}


def _inputs_parts(cell: Cell) -> tuple[str, str | None]:
    inputs = cell.inputs()
    inputs["memory_budget"] = _HOLE
    before, hole, after = render_entry(inputs).partition(_HOLE_JSON)
    parts = (before, after) if hole and _HOLE_JSON not in after else ("", None)
    if len(_INPUTS_TEXT) >= 4096:
        _INPUTS_TEXT.clear()
    _INPUTS_TEXT[cell.inputs_key()] = parts
    return parts


def render_manifest(
    entries: Iterable[dict[str, Any]], sections: dict[str, Any] | None = None, rendered: dict[str, str] | None = None
) -> bytes:
    """Valid, deterministic JSON with one line per cell (sorted keys everywhere): readable, diffable,
    and rendered by json's C encoder (an indented dump of 1,000 cells takes ~10x longer).
    ``sections``: more top-level keys (``deployments``), each one indented JSON value. ``rendered``:
    cell id -> ``render_entry`` of that cell's entry, rendered already (by the workers)."""
    cells = sorted((e["cell"], e) for e in entries)
    given = rendered or {}
    parts: list[str] = []  # joined once: a sweep's lines are 2 KB each (22 MB for 10,008 cells), never copied twice
    for cid, e in cells:
        parts += (
            ",\n    " if parts else "    ",
            _LINE.encode(cid),
            ": ",
            given.get(cid) or render_entry(e),
        )
    body = "".join(parts)
    extra = "".join(
        f"  {json.dumps(key)}: "
        + json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False).replace("\n", "\n  ")
        + ",\n"
        for key, value in sorted((sections or {}).items())
    )
    text = (
        '{\n  "cells": {\n'
        + body
        + ("\n" if parts else "")
        + "  },\n"
        + extra
        + '  "schema_version": '
        + str(SCHEMA_VERSION)
        + "\n}\n"
    )
    return text.encode("utf-8")


def summarize(entries: list[dict[str, Any]], compiled: int, redone: set[str]) -> dict[str, Any]:
    """Counts for one run. Cells are partitioned: failed (incl. unexpected successes), expected_failures,
    finalized (resolved and finalized in this run), skipped (reused unchanged)."""
    failed = sorted(e["cell"] for e in entries if e["status"] in FAILING_STATUSES)
    expected = sorted(e["cell"] for e in entries if e["status"] == "expected_failure")
    ok = [e["cell"] for e in entries if e["status"] == "ok"]
    return {
        "schema_version": SCHEMA_VERSION,
        "cells": len(entries),
        "compiled": compiled,
        "finalized": sum(1 for c in ok if c in redone),
        "skipped": sum(1 for c in ok if c not in redone),
        "failed": len(failed),
        "expected_failures": len(expected),
        "failed_cells": failed,
        "expected_failure_cells": expected,
        "redone_cells": sorted(redone),
    }


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    """``fn(*args)`` and the seconds it took."""
    started = time.perf_counter()
    return fn(*args), time.perf_counter() - started


def run_timings(
    groups: dict[str, list[Any]],
    redone: set[str],
    took: dict[str, dict[str, float]],
    parallel: Any,
    labels: dict[str, str],
) -> dict[str, Any]:
    """summary.json's ``compiles`` (each compile of this run: its key, label, seconds and the cells
    redone with it) and ``cell_cost_s`` (each redone cell: its own resolve and finalize plus an even
    share of its compile key's seconds among the cells redone with it). ``took``: the seconds the
    serial path measured (``compiles`` by key, ``cells`` by id); ``parallel``: what the workers
    reported; ``labels``: compile key -> its display label. For summary.json only, which nothing
    hashes or compares (the manifest holds no time)."""
    compile_s, cell_s = dict(took["compiles"]), dict(took["cells"])
    if parallel is not None:
        for key, done in parallel.compile_results.items():
            if done.fresh or done.error is not None:
                compile_s[key] = done.elapsed_s
        cell_s.update(parallel.cell_seconds)
    rows = []
    for key, seconds in sorted(compile_s.items()):
        rows.append(
            {
                "compile_key": key,
                "label": labels.get(key, "-"),
                "seconds": round(seconds, 3),
                "cells_redone": sum(c.id in redone for c in groups.get(key, [])),
            }
        )
    cost: dict[str, float] = {}
    for key, cells in groups.items():
        ids = [c.id for c in cells if c.id in redone]
        share = compile_s.get(key, 0.0) / len(ids) if ids else 0.0
        for cid in ids:
            cost[cid] = round(share + cell_s.get(cid, 0.0), 3)
    return {"compiles": rows, "cell_cost_s": dict(sorted(cost.items()))}
