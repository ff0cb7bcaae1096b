"""The build in process: a compile that fails fails only its cells and the next run retries it,
unless the failure is the inputs' own (then it is stored and not retried); the manifest is still
written. The failing backend is a plug-in given by import path (tests/plugins/rbln_test_plugins)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rbln_build.colocation import expand_all
from rbln_build.config._config import compose_settings
from rbln_build.pipeline._tasks import BuildRun, scope_inventory_cache

FLAKY = "matrix.backend=rbln_test_plugins:FlakyBackend"


def _build(build_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[BuildRun, dict[str, Any]]:
    _, cells = expand_all([compose_settings(["matrix=plans", "model=llama3_2_1b", FLAKY, f"build_dir={build_dir}"])])
    build = BuildRun(build_dir, cells, progress=True)
    assert build.run() == 0
    build.summary()
    capsys.readouterr()
    return build, json.loads((build_dir / "manifest.json").read_text())["cells"]


@pytest.mark.parametrize(
    ("error", "kind", "message", "retried"),
    [
        pytest.param("build", "build_failed", "compiler crashed", True, id="build-error"),
        pytest.param("runtime", "build_failed", "RuntimeError: segfault-ish", True, id="unexpected-exception"),
        pytest.param(
            "input", "insufficient_memory", "the compiler says this model does not fit", False, id="input-failure"
        ),
    ],
)
def test_failed_compile_fails_its_cells_and_is_retried_unless_final(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    error: str,
    kind: str,
    message: str,
    retried: bool,
) -> None:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "inventory"))  # no process-wide side effect
    monkeypatch.setenv("RBLN_TEST_FAIL_FAMILY", "RBLN-CR")
    monkeypatch.setenv("RBLN_TEST_FAIL_ERROR", error)
    build, cells = _build(tmp_path, capsys)
    assert len(build.compiled) == 1  # the other family's key
    failing = sorted(c for c in cells if ".rebel100." in c)
    for cid, e in cells.items():
        if cid in failing:
            assert (e["status"], e["error_kind"], e["error"]) == ("failed", kind, message)
            assert e["artifact"] is None
        else:
            assert e["status"] == "ok"
    assert not list(tmp_path.rglob(".tmp-*")) and not list(tmp_path.rglob("partial.bin"))
    if error == "runtime":  # the traceback is kept in a log file, not printed
        assert list((tmp_path / "logs").glob("compile-*.txt"))
    monkeypatch.delenv("RBLN_TEST_FAIL_FAMILY")  # the backend now compiles everything
    again, cells = _build(tmp_path, capsys)
    if retried:
        assert len(again.compiled) == 1  # only the failed key is compiled again
        assert sorted(again.redone) == failing
        assert all(e["status"] == "ok" for e in cells.values())
    else:  # the inputs did not change: the stored failure stands
        assert (again.compiled, again.redone) == ([], set())
        assert all(cells[c]["error_kind"] == kind for c in failing)


@pytest.mark.parametrize("chosen", [pytest.param(None, id="unset"), pytest.param("mine", id="set-by-the-user")])
def test_a_build_keeps_inventories_in_its_build_dir_unless_the_user_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: str | None
) -> None:
    from rbln_build.memory import _inventory as inventory

    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / str(chosen)))  # recorded, so restored afterwards
    if chosen is None:
        monkeypatch.delenv("RBLN_BUILD_CACHE")
    scope_inventory_cache(tmp_path / "build")
    expected = tmp_path / "build" / "cache" if chosen is None else tmp_path / chosen
    assert inventory.default_cache_dir() == expected / "inventory"
