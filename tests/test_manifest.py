"""Manifest entries, statuses against expect_failure, deterministic rendering, summary counts."""

from __future__ import annotations

import json

import pytest

from rbln_build.config._config import compose_settings
from rbln_build.config._matrix import Cell, expand
from rbln_build.pipeline._manifest import SCHEMA_VERSION, entry_for, render_manifest, summarize
from rbln_build.store._result import CellResult

TOOLCHAIN = {"torch": "t", "transformers": "t", "format": "1"}
INSUFFICIENT = (
    "Insufficient memory for the required KV cache: only 3 blocks can be allocated, but at least 9 blocks are required."
)


def _cells() -> dict[str, Cell]:
    return {c.id: c for c in expand(compose_settings(["matrix=plans"]), TOOLCHAIN)}


def _ok(blocks: int = 21) -> CellResult:
    return CellResult(
        "c" * 64,
        "k" * 64,
        kvcache_num_blocks=blocks,
        num_full_blocks=40,
        num_min_blocks=9,
        budget_bytes=45097156608,
        produced="plan",
        artifact_key="a" * 64,
        artifact_hash="sha256:" + "b" * 64,
    )


def _failed(kind: str = "insufficient_memory", message: str = INSUFFICIENT) -> CellResult:
    return CellResult(
        "c" * 64,
        "k" * 64,
        error=message,
        error_kind=kind,
        num_full_blocks=40,
        num_min_blocks=9,
        budget_bytes=5063363788,
        produced="plan",
    )


def test_ok_entry() -> None:
    cell = _cells()["qwen3_8b.rebel100.b0.3"]
    e = entry_for(cell, _ok())
    assert e["status"] == "ok" and e["kvcache_num_blocks"] == 21 and e["memory_budget"] == 0.3
    assert e["artifact"] == {"path": "artifacts/qwen3_8b.rebel100.b0.3", "content_hash": "sha256:" + "b" * 64}
    assert e["compile_key"] == cell.compile_key and e["cell_key"] == cell.cell_key
    assert e["inputs"]["npu"] == "RBLN-CR03" and e["inputs"]["recipe"] == "qwen3_8b"


@pytest.mark.parametrize(
    ("cell_id", "result", "status"),
    [
        pytest.param("qwen3_8b.rebel100.b0.5", "failed", "failed", id="plain-failure"),
        pytest.param("qwen3_8b.atom_max_x4.b0.3", "failed", "expected_failure", id="expected"),
        pytest.param("qwen3_8b.atom_max_x4.b0.3", "other-kind", "failed", id="expected-other-kind"),
        pytest.param("qwen3_8b.atom_max_x4.b0.3", "ok", "unexpected_success", id="unexpected-success"),
        pytest.param("qwen3_8b.rebel100.b0.5", None, "failed", id="not-built"),
        pytest.param("qwen3_8b.atom_max_x4.b0.3", None, "failed", id="expected-but-not-built"),
    ],
)
def test_status(cell_id: str, result: str | None, status: str) -> None:
    cell = _cells()[cell_id]
    body = {"failed": _failed(), "other-kind": _failed("budget_exceeds_dram", "x"), "ok": _ok(), None: None}[result]
    e = entry_for(cell, body)  # type: ignore[arg-type]
    assert e["status"] == status
    if result == "failed":
        assert e["error"] == INSUFFICIENT and e["error_kind"] == "insufficient_memory"
    if status != "ok":
        assert e["error"]
        assert status == "expected_failure" or e["artifact"] is None or status == "unexpected_success"


def test_render_is_deterministic_and_sorted() -> None:
    cells = list(_cells().values())
    entries = [entry_for(c, _ok()) for c in cells]
    a = render_manifest(entries)
    b = render_manifest(list(reversed(entries)))
    assert a == b and a.endswith(b"\n")
    doc = json.loads(a)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert list(doc["cells"]) == sorted(c.id for c in cells)


def test_budget_type_survives_rendering() -> None:
    cells = expand(compose_settings(["matrix=plans", "matrix.budgets=[1,1.0]"]), TOOLCHAIN)
    doc = json.loads(render_manifest([entry_for(c, _ok()) for c in cells]))
    budgets = {e["cell"].rsplit(".b", 1)[1]: e["memory_budget"] for e in doc["cells"].values()}
    assert type(budgets["1"]) is int and type(budgets["1.0"]) is float


def test_summary_counts_partition_the_cells() -> None:
    cells = _cells()
    entries = [entry_for(c, _failed() if c.expected else _ok()) for c in cells.values()]
    entries[0] = entry_for(cells["llama3_2_1b.atom_max_x4.b0.3"], _failed("budget_exceeds_dram", "too big"))
    s = summarize(entries, compiled=2, redone={"llama3_2_1b.rebel100.b0.3", "qwen3_8b.rebel100.b0.3"})
    assert s["compiled"] == 2 and s["failed"] == 1 and s["expected_failures"] == 1
    assert s["finalized"] == 2 and s["skipped"] == 4
    assert s["finalized"] + s["skipped"] + s["failed"] + s["expected_failures"] == s["cells"] == 8
    assert s["failed_cells"] == ["llama3_2_1b.atom_max_x4.b0.3"]


def test_a_workers_line_is_the_plain_rendering_of_the_entry() -> None:
    """``manifest_line`` renders a cell's inputs once per ``Cell.inputs_key`` with a hole for the
    budget, and the line with a hole for the inputs: the bytes must be ``render_entry(entry_for())``'s
    for every kind of budget and result, including a message that holds the hole's own text."""
    import dataclasses

    from rbln_build.pipeline._manifest import _HOLE, manifest_line, render_entry

    matrix = ["matrix=plans", "matrix.budgets=[0.3,0.5,1.0,1,null,'50%','10GB',1073741824]"]
    cells = expand(compose_settings(matrix), TOOLCHAIN)
    assert len({c.inputs_key() for c in cells}) < len(cells)  # budgets share their inputs' rendering
    results = [
        _ok(),
        _failed(),
        None,
        _failed(message=f"a message with {_HOLE} in it, twice: {_HOLE}"),
        dataclasses.replace(_ok(), warnings=("ünïcode ✓", "\x1b[31mred\x1b[0m")),
    ]
    checked = 0
    for cell in cells:
        for result in results:
            if result is None:
                continue  # manifest_line is only called for a built cell (its worker's result)
            assert manifest_line(cell, result) == render_entry(entry_for(cell, result)), (cell.id, result)
            checked += 1
    assert checked == 4 * len(cells)
    for cell in cells:  # and the budget's own rendering: 1 and 1.0 stay apart, null stays null
        budget = json.loads(manifest_line(cell, _ok()))["inputs"]["memory_budget"]
        assert budget == cell.memory_budget and type(budget) is type(cell.memory_budget)
