"""Compile keys and cell keys: sha256 over canonical JSON.

* compile key: everything that changes what the backend compiles -- ``CompileSpec.key_fields()``
  (recipe content hash, NPU family, device count, resolved attention options), the backend's name
  and toolchain versions, and the version of the project's compile code. Not the budget, not an
  explicit block count: every budget of one compile key shares one compile.
* cell key: the compile key + the target NPU name + ``memory_budget`` exactly as typed (``1`` and
  ``1.0`` differ, as they do for the estimator) + the explicit ``kvcache_num_blocks``.

The code version is a hash of the package's source files that take part in compiling and resolving
(everything except the orchestration modules listed in ``_ORCHESTRATION``), plus a constant to bump
by hand. Editing the memory model or a backend therefore changes every key, and nothing stale is
reused; editing the CLI or the manifest writer does not.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["canonical_json", "digest", "code_version", "compile_key", "cell_key", "COMPILE_CODE_EPOCH"]

COMPILE_CODE_EPOCH = 1  # bump to invalidate every compile without touching compile code

_PACKAGE = Path(__file__).resolve().parent
# Modules that only orchestrate, report or run artifacts: they never change what is compiled or resolved.
_ORCHESTRATION = frozenset(
    {"cli.py", "tasks.py", "matrix.py", "config.py", "manifest.py", "cache.py", "keys.py", "explain.py",
     "run.py", "runtime.py", "estimate.py", "__main__.py"}
)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, no NaN: equal values give equal strings (key order never matters)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


@lru_cache(maxsize=1)
def code_version() -> str:
    h = hashlib.sha256(f"epoch={COMPILE_CODE_EPOCH}\0".encode())
    for path in sorted(_PACKAGE.rglob("*.py")):
        rel = path.relative_to(_PACKAGE).as_posix()
        if rel in _ORCHESTRATION:
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def compile_key(key_fields: dict[str, Any], backend: str, toolchain: dict[str, str], code: str | None = None) -> str:
    return digest(
        {
            "kind": "compile",
            "spec": key_fields,
            "backend": backend,
            "toolchain": toolchain,
            "code": code_version() if code is None else code,
        }
    )


def _check_budget(budget: Any) -> None:
    if isinstance(budget, float) and not math.isfinite(budget):
        raise ValueError(f"memory_budget {budget!r} is not a finite number")


def cell_key(compile_key_: str, npu: str, memory_budget: Any, kvcache_num_blocks: int) -> str:
    _check_budget(memory_budget)
    return digest(
        {
            "kind": "cell",
            "compile": compile_key_,
            "npu": npu,
            "memory_budget": memory_budget,
            "kvcache_num_blocks": kvcache_num_blocks,
        }
    )
