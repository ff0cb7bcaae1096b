"""The doit tasks in process: a compile that fails fails only its cells, is not remembered, and is
retried by the next run; the manifest is still written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rbln_build.backends import get_backend
from rbln_build.build._config import compose_settings
from rbln_build.errors import BuildError
from rbln_build.build._matrix import expand_all
from rbln_build.build._tasks import Build


class FlakyBackend:
    """The real torch backend, except that compiling for one NPU family raises."""

    def __init__(self, failing_family: str | None, error: Exception) -> None:
        self.real = get_backend("torch")
        self.failing_family = failing_family
        self.error = error

    def toolchain(self) -> dict[str, str]:
        return self.real.toolchain()  # type: ignore[no-any-return]

    def compile(self, spec: Any, out_dir: Path) -> Any:
        if spec.npu.family == self.failing_family:
            (out_dir / "partial.bin").write_bytes(b"half")
            raise self.error
        return self.real.compile(spec, out_dir)

    def finalize(self, *args: Any) -> None:
        self.real.finalize(*args)


def _build(build_dir: Path, backend: FlakyBackend, capsys: pytest.CaptureFixture[str]) -> tuple[Build, dict[str, Any]]:
    _, cells = expand_all([compose_settings(["matrix=plans", "model=llama3_2_1b", f"build_dir={build_dir}"])])
    build = Build(build_dir, cells, progress=True)
    build._backends["torch"] = backend
    assert build.run_doit() == 0
    capsys.readouterr()
    return build, json.loads((build_dir / "manifest.json").read_text())["cells"]


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        pytest.param(BuildError("compiler crashed"), "build_failed", "compiler crashed", id="build-error"),
        pytest.param(RuntimeError("segfault-ish"), "build_failed", "RuntimeError: segfault-ish", id="unexpected-exception"),
    ],
)
def test_failed_compile_fails_its_cells_and_is_retried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    error: Exception, kind: str, message: str,
) -> None:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / "inventory"))  # no process-wide side effect
    build, cells = _build(tmp_path, FlakyBackend("RBLN-CR", error), capsys)
    assert build.compiled and len(build.compile_errors) == 1
    for cid, e in cells.items():
        if ".rebel100." in cid:
            assert (e["status"], e["error_kind"], e["error"]) == ("failed", kind, message)
            assert e["artifact"] is None
        else:
            assert e["status"] == "ok"
    assert not list(tmp_path.rglob(".tmp-*")) and not list(tmp_path.rglob("partial.bin"))
    again, cells = _build(tmp_path, FlakyBackend(None, error), capsys)
    assert len(again.compiled) == 1  # only the failed key is compiled again
    assert sorted(again.redone) == sorted(c for c in cells if ".rebel100." in c)
    assert all(e["status"] == "ok" for e in cells.values())


@pytest.mark.parametrize("chosen", [pytest.param(None, id="unset"), pytest.param("mine", id="set-by-the-user")])
def test_a_build_keeps_inventories_in_its_build_dir_unless_the_user_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: str | None
) -> None:
    from rbln_build.memory import _inventory as inventory

    monkeypatch.setenv("RBLN_BUILD_CACHE", str(tmp_path / str(chosen)))  # recorded, so restored afterwards
    if chosen is None:
        monkeypatch.delenv("RBLN_BUILD_CACHE")
    Build(tmp_path / "build", [])._scope_inventory_cache()
    expected = tmp_path / "build" / "cache" if chosen is None else tmp_path / chosen
    assert inventory.default_cache_dir() == expected / "inventory"
