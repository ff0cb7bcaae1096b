"""Derived keys are checked when a record is reused (docs/security.md, "What is verified, and when").

An artifact key is derived from the cell (compile key, target NPU, block count), so a result record
that points a cell at another valid artifact -- the cell resolved to 21 blocks, the record names the
40-block artifact, its self-hash recomputed -- is caught: ``status`` does not call it up to date, and
the next build warns naming the record file, removes it and redoes the cell, so the manifest and the
link agree again.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest

from rbln_build.colocation import expand_all
from rbln_build.commands._status import cell_statuses
from rbln_build.config import compose_settings
from rbln_build.pipeline import BuildRun
from rbln_build.pipeline._publish import MANIFEST_FILE, publish
from rbln_build.store import CellResult, Store

SMALL = ["matrix=plans", "model=qwen3_8b", "device=rebel100"]  # one compile; budgets 0.3 and 0.5: 21 and 40 blocks


def _cells(build: Path) -> list:
    return expand_all([compose_settings([*SMALL, f"build_dir={build}"])])[1]


def _build(build: Path, monkeypatch: pytest.MonkeyPatch) -> BuildRun:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(build / "cache"))
    run = BuildRun(build, _cells(build), progress=False, out=io.StringIO())
    run.run()
    run.summary()
    return run


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = tmp_path_factory.mktemp("clean") / "build"
    with pytest.MonkeyPatch.context() as mp:
        run = _build(build, mp)
    assert run.output_error is None and all(e["status"] == "ok" for e in run.entries)
    return build


def test_a_record_pointing_a_cell_at_another_valid_artifact_is_caught(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = tmp_path / "build"
    shutil.copytree(clean, build, symlinks=True)
    cells = json.loads((build / MANIFEST_FILE).read_text())["cells"]
    small, large = sorted(cells.items(), key=lambda kv: kv[1]["kvcache_num_blocks"])
    assert (small[1]["kvcache_num_blocks"], large[1]["kvcache_num_blocks"]) == (21, 40)
    store = Store(build / "cache")
    forged = store.load_record("results", small[1]["cell_key"])
    genuine = store.load_record("results", large[1]["cell_key"])
    assert forged is not None and genuine is not None
    forged["artifact_key"], forged["artifact_hash"] = genuine["artifact_key"], genuine["artifact_hash"]
    store.save_record("results", small[1]["cell_key"], forged)  # consistent: its self-hash is recomputed
    # ... and the manifest and links rewritten as a build would publish them from that record
    rows = [(cell, CellResult.from_json(store.load_record("results", cell.cell_key))) for cell in _cells(build)]
    publish(build, rows)
    assert os.readlink(build / "artifacts" / small[0]) == os.readlink(build / "artifacts" / large[0])

    statuses, _ = cell_statuses(build, _cells(build))
    state = {s.cell: s for s in statuses}[small[0]]
    assert state.state != "up to date" and "forged or damaged" in "; ".join(state.reasons)

    run = _build(build, monkeypatch)
    err = "\n".join(run.warnings)
    assert run.output_error is None
    record = store.record_path("results", small[1]["cell_key"])
    assert f"cache record {record} of cell {small[0]}" in err and "it points at artifact" in err
    assert (build / MANIFEST_FILE).read_bytes() == (clean / MANIFEST_FILE).read_bytes()
    assert os.readlink(build / "artifacts" / small[0]) == os.readlink(clean / "artifacts" / small[0])
    linked = json.loads((build / "artifacts" / small[0] / "rbln-build.json").read_text())
    assert linked["kvcache_num_blocks"] == 21


def test_rolling_links_forward_never_follows_a_forged_record(clean: Path, tmp_path: Path) -> None:
    from rbln_build.pipeline._publish import PUBLISHING_FILE, recover

    build = tmp_path / "build"
    shutil.copytree(clean, build, symlinks=True)
    manifest = json.loads((build / MANIFEST_FILE).read_text())
    small, large = sorted(manifest["cells"].items(), key=lambda kv: kv[1]["kvcache_num_blocks"])
    store = Store(build / "cache")
    forged = store.load_record("results", small[1]["cell_key"])
    genuine = store.load_record("results", large[1]["cell_key"])
    assert forged is not None and genuine is not None
    forged["artifact_key"], forged["artifact_hash"] = genuine["artifact_key"], genuine["artifact_hash"]
    store.save_record("results", small[1]["cell_key"], forged)
    manifest["cells"][small[0]]["artifact"]["content_hash"] = genuine["artifact_hash"]  # the manifest agrees
    (build / MANIFEST_FILE).write_text(json.dumps(manifest))
    (build / "artifacts" / small[0]).unlink()
    (build / PUBLISHING_FILE).write_bytes(b"")  # an interrupted publish: the next run rolls links forward
    assert recover(build, store) == 0
    assert not os.path.lexists(build / "artifacts" / small[0])  # not linked to the 40-block artifact


def test_a_link_repointed_at_another_artifact_is_repaired_with_a_warning_naming_it(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = tmp_path / "build"
    shutil.copytree(clean, build, symlinks=True)
    cells = json.loads((build / MANIFEST_FILE).read_text())["cells"]
    small, large = sorted(cells, key=lambda cid: cells[cid]["kvcache_num_blocks"])
    link = build / "artifacts" / small
    original = os.readlink(link)
    link.unlink()
    link.symlink_to(os.readlink(build / "artifacts" / large))  # a link of ours' shape, at the 40-block artifact
    run = _build(build, monkeypatch)
    assert run.output_error is None
    assert os.readlink(link) == original
    [warning] = [w for w in run.warnings if str(link) in w]
    assert "re-linked" in warning and "changed since the last build" in warning
