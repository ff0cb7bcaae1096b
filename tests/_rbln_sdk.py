"""The Rebellions SDK side for tests: the real optimum-rbln 0.12.0 (``pip install --no-deps
optimum-rbln==0.12.0``) with only the compiler stood in (``tests/fakes/rebel``).

Tests that need it are skipped when optimum-rbln is not installed; the suite passes either way.
``sdk_on_path`` puts the stand-in compiler on ``sys.path`` (and, for subprocesses, ``PYTHONPATH``);
``hide_sdk`` makes an installed SDK invisible, for the tests of its absence.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

FAKES = Path(__file__).parent / "fakes"
SDK_MODULES = ("rebel", "optimum.rbln")


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


HAS_OPTIMUM_RBLN = _installed("optimum.rbln")
needs_optimum_rbln = pytest.mark.skipif(
    not HAS_OPTIMUM_RBLN, reason="optimum-rbln 0.12.0 is not installed (pip install --no-deps optimum-rbln==0.12.0)"
)


def sdk_env() -> dict[str, str]:
    """Environment for a subprocess that should see the stand-in compiler."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(FAKES) + (os.pathsep + path if path else ""), "HF_HUB_OFFLINE": "1"}


def sdk_on_path(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """Import the stand-in ``rebel`` and the real ``optimum.rbln`` (modules stay imported: the stand-in
    registers torch ops once per process)."""
    if str(FAKES) not in sys.path:
        monkeypatch.syspath_prepend(str(FAKES))
    import optimum.rbln
    import rebel

    return rebel, optimum.rbln


class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if any(fullname == m or fullname.startswith(m + ".") for m in SDK_MODULES):
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden by the test)", name=fullname)
        return None


def hide_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``rebel`` and ``optimum.rbln`` unimportable and unfindable for this test, installed or not."""
    from rbln_build.backends import get_backend

    get_backend.cache_clear()  # an rbln backend made by an earlier test must not answer for the hidden SDK
    for name in list(sys.modules):
        if any(name == m or name.startswith(m + ".") for m in SDK_MODULES):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_Blocker(), *sys.meta_path])
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        if any(name == m or name.startswith(m + ".") for m in SDK_MODULES):
            return None
        return real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def make_recipe(
    root: Path,
    name: str,
    base: str,
    config: dict[str, Any] | None = None,
    build: dict[str, Any] | None = None,
    dtype: str | None = None,
    weights: dict[str, Any] | None = None,
    with_config: bool = True,
) -> Path:
    """A recipe folder ``root/name`` derived from the shipped recipe ``base``."""
    import yaml

    from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR

    src = DEFAULT_RECIPES_DIR / base
    folder = root / name
    folder.mkdir(parents=True)
    hf = json.loads((src / "config.json").read_text())
    hf.update(config or {})
    if with_config:
        (folder / "config.json").write_text(json.dumps(hf, indent=2))
    meta = yaml.safe_load((src / "recipe.yaml").read_text())
    meta["name"] = name
    meta["build"] = {**meta.get("build", {}), **(build or {})}
    if dtype is not None:
        meta["dtype"] = dtype
    if weights is not None:
        meta["weights"] = weights
    (folder / "recipe.yaml").write_text(yaml.safe_dump(meta, sort_keys=True))
    return folder


# A decoder whose weights are tiny but whose KV cache at the flash floor does not fit an ATOM-Max:
# 32 KV heads x head_dim 256 x block 1024 x bf16 = 16 MiB per tensor and block, 8 layers -> 256 MiB a
# block; batch 64 puts the floor at 65 blocks = 16,640 MiB > 16,096 MiB available. A Rebel100 fits it.
TOO_BIG_CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 256,
    "num_hidden_layers": 8,
    "torch_dtype": "bfloat16",
}
TOO_BIG_BUILD = {"batch_size": 64, "max_seq_len": 8192, "attn_impl": "flash_attn", "kvcache_partition_len": 1024}


def copy_without(src: Path, dst: Path, skip: tuple[str, ...]) -> None:
    dst.mkdir(parents=True)
    for item in src.iterdir():
        if item.name not in skip:
            shutil.copyfile(item, dst / item.name)
