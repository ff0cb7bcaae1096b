"""Compile and cell keys: canonical, complete, and nothing more."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbln_build.config._config import compose_settings
from rbln_build.config._matrix import expand
from rbln_build.store._keys import canonical_json, cell_key, compile_key, digest

TOOLCHAIN = {"torch": "2.13.0", "transformers": "5.15.1", "format": "1"}


def test_key_order_does_not_matter() -> None:
    a = {"b": 1, "a": {"y": [1, 2], "x": None}}
    b = {"a": {"x": None, "y": [1, 2]}, "b": 1}
    assert canonical_json(a) == canonical_json(b)
    assert digest(a) == digest(b)
    fields_a = {"recipe": "r", "npu_family": "RBLN-CR", "num_devices": 1}
    fields_b = dict(reversed(list(fields_a.items())))
    assert compile_key(fields_a, "torch", TOOLCHAIN, code="c") == compile_key(fields_b, "torch", TOOLCHAIN, code="c")


def test_toolchain_version_changes_the_compile_key() -> None:
    fields = {"recipe": "r"}
    upgraded = dict(TOOLCHAIN, torch="2.14.0")
    assert compile_key(fields, "torch", TOOLCHAIN, code="c") != compile_key(fields, "torch", upgraded, code="c")


def test_backend_and_code_version_change_the_compile_key() -> None:
    fields = {"recipe": "r"}
    base = compile_key(fields, "torch", TOOLCHAIN, code="c")
    assert base != compile_key(fields, "rbln", TOOLCHAIN, code="c")
    assert base != compile_key(fields, "torch", TOOLCHAIN, code="d")


def test_budget_types_differ_in_the_cell_key() -> None:
    assert cell_key("k", "RBLN-CA25", 1, 0) != cell_key("k", "RBLN-CA25", 1.0, 0)
    assert cell_key("k", "RBLN-CA25", None, 0) != cell_key("k", "RBLN-CA25", 0.3, 0)
    assert cell_key("k", "RBLN-CA25", None, 0) != cell_key("k", "RBLN-CA25", None, 12)


def test_nan_budget_is_rejected() -> None:
    with pytest.raises(ValueError):
        cell_key("k", "RBLN-CA25", float("nan"), 0)


def _cells(overrides: list[str], toolchain: dict[str, str] = TOOLCHAIN):  # type: ignore[no-untyped-def]
    return expand(compose_settings(["matrix=plans", *overrides]), toolchain)


def test_budget_and_explicit_blocks_are_not_in_the_compile_key() -> None:
    cells = _cells(
        ["model=qwen3_8b", "device=rebel100", "matrix.budgets=[0.3,0.5,1,null]", "matrix.kvcache_num_blocks=[0,12]"]
    )
    assert len(cells) == 8
    assert len({c.compile_key for c in cells}) == 1
    assert len({c.cell_key for c in cells}) == 8


def test_build_options_and_device_count_are_in_the_compile_key() -> None:
    base = {c.compile_key for c in _cells(["model=qwen3_8b", "device=rebel100"])}
    assert base.isdisjoint(
        {c.compile_key for c in _cells(["model=qwen3_8b", "device=rebel100", "matrix.batch_sizes=[1]"])}
    )
    x1 = {c.compile_key for c in _cells(["model=qwen3_8b", "device=atom_max"])}
    x4 = {c.compile_key for c in _cells(["model=qwen3_8b", "device=atom_max_x4"])}
    assert x1.isdisjoint(x4)


def test_toolchain_reaches_every_key() -> None:
    a = _cells([])
    b = _cells([], dict(TOOLCHAIN, transformers="9.9.9"))
    assert all(x.compile_key != y.compile_key and x.cell_key != y.cell_key for x, y in zip(a, b, strict=True))


def test_code_versions_follow_the_import_closure() -> None:
    import rbln_build
    from rbln_build.store._keys import RESOLVE_MODULE, backend_module, module_closure

    pkg = Path(rbln_build.__file__).parent

    def closure(module: str) -> set[str]:
        return {p.relative_to(pkg).as_posix() for p in module_closure(module)}

    torch_files = closure(backend_module("torch"))
    assert {"backends/torch/_export.py", "backends/_base.py", "memory/_model.py", "memory/_recipes.py"} <= torch_files
    assert not {f for f in torch_files if f.startswith("build/")}
    resolve_files = closure(RESOLVE_MODULE)
    assert "estimator/_search.py" in resolve_files
    assert {f for f in resolve_files if not f.startswith("estimator/")} == {"__init__.py", "errors.py"}
    # the estimator's block arithmetic lives in a private module: editing it must change the cell keys too
    assert {
        "estimator/_pool.py",
        "estimator/_report.py",
        "estimator/_budget.py",
        "estimator/_attention.py",
        "estimator/_npu.py",
        "estimator/_units.py",
        "estimator/_estimate.py",
        "estimator/_breakdown.py",
    } <= resolve_files


def test_resolve_code_is_in_the_cell_key_only() -> None:
    assert cell_key("k", "RBLN-CA25", 0.3, 0, resolve_code="a") != cell_key("k", "RBLN-CA25", 0.3, 0, resolve_code="b")
