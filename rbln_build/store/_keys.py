"""Compile keys and cell keys: sha256 over canonical JSON.

* compile key: everything that changes what the backend compiles -- ``CompileSpec.key_fields()``
  (recipe content hash, NPU family, device count, resolved attention options), the backend's name
  and toolchain versions, and the version of the project's compile code. Not the budget, not an
  explicit block count: every budget of one compile key shares one compile.
* cell key: the compile key + the target NPU name + ``memory_budget`` exactly as typed (``1`` and
  ``1.0`` differ, as they do for the estimator) + the explicit ``kvcache_num_blocks``.

The code versions are hashes of source files, found statically (a regex over the sources, nothing imported): the
compile code version covers the backend module and every package module it imports, transitively
(lazy imports inside functions included); the resolve code version does the same for the estimator
and enters the cell key. Editing the memory model or a backend changes the compile keys, editing the
estimator changes the cell keys, and editing the CLI or the manifest writer changes neither. A
constant, ``COMPILE_CODE_EPOCH``, can be bumped by hand to invalidate every compile.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "canonical_json",
    "digest",
    "code_version",
    "module_closure",
    "compile_key",
    "cell_key",
    "key_code_versions",
    "COMPILE_CODE_EPOCH",
]

COMPILE_CODE_EPOCH = 1  # bump to invalidate every compile without touching compile code

_PACKAGE = Path(__file__).resolve().parents[1]
_PACKAGE_NAME = _PACKAGE.name


def _module_file(name: str) -> Path | None:
    """rbln_build.x.y -> its .py file (module or package __init__), or None if not in the package."""
    parts = name.split(".")
    if parts[0] != _PACKAGE_NAME:
        return None
    base = _PACKAGE.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(_PACKAGE).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([_PACKAGE_NAME, *parts])


_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([\w., \t]+))", re.M
)


def _imports(path: Path) -> set[str]:
    """Modules a source file imports (top level or inside functions). A regex, not ``ast``: it runs
    on every start-up; an import-looking line inside a string only adds a file (the safe side)."""
    name = _module_name(path)
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for dots, module, names, plain in _IMPORT.findall(path.read_text(encoding="utf-8")):
        if plain:
            out.update(n.strip().split(" ")[0] for n in plain.split(",") if n.strip())
            continue
        if dots:
            parts = name.split(".")
            base_parts = parts[: len(parts) - len(dots) + (1 if is_pkg else 0)]
            base = ".".join(base_parts + ([module] if module else []))
        else:
            base = module
        out.add(base)
        for alias in names.strip("()").replace("\n", " ").split(","):
            alias = alias.split("#")[0].strip().split(" ")[0]
            if alias:
                out.add(f"{base}.{alias}")  # `from . import memory` imports a module
    return out


@cache
def module_closure(module: str) -> tuple[Path, ...]:
    """The package's source files ``module`` imports, transitively, with the packages on the way."""
    seen: set[Path] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            path = _module_file(".".join(parts[:i]))
            if path is not None and path not in seen:
                seen.add(path)
                todo.extend(_imports(path))
    return tuple(sorted(seen))


@cache
def code_version(module: str) -> str:
    """sha256 over the sources of ``module``'s closure inside the package (names included)."""
    h = hashlib.sha256(f"epoch={COMPILE_CODE_EPOCH}\0".encode())
    for path in module_closure(module):
        h.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def backend_module(backend: str) -> str:
    from ..backends import backend_path

    return backend_path(backend).split(":")[0]


def _external_version(module: str) -> str:
    """A plug-in backend outside the package: the hash of its module's source (found, not imported)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    data = origin.read_bytes() if origin is not None and origin.is_file() else b""
    return hashlib.sha256(f"epoch={COMPILE_CODE_EPOCH}\0{module}\0".encode() + data).hexdigest()


def backend_code_version(backend: str) -> str:
    module = backend_module(backend)
    return code_version(module) if module.split(".")[0] == _PACKAGE_NAME else _external_version(module)


RESOLVE_MODULE = f"{_PACKAGE_NAME}.estimator"


@cache
def _key_code_versions(backend: str) -> tuple[tuple[str, str], ...]:
    return (("backend", backend_code_version(backend)), ("estimator", code_version(RESOLVE_MODULE)))


def key_code_versions(backend: str) -> dict[str, str]:
    """The code versions the keys hash: the backend's (compile key) and the estimator's (cell key)."""
    return dict(_key_code_versions(backend))


# One encoder for every call: ``json.dumps`` with options builds a JSONEncoder per call, which cost
# about a third of rendering a sweep cell's record (its ``encode`` is what ``dumps`` calls).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, no NaN: equal values give equal strings (key order never matters)."""
    return _CANONICAL.encode(value)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def compile_key(key_fields: dict[str, Any], backend: str, toolchain: dict[str, str], code: str | None = None) -> str:
    return digest(
        {
            "kind": "compile",
            "spec": key_fields,
            "backend": backend,
            "toolchain": toolchain,
            "code": backend_code_version(backend) if code is None else code,
        }
    )


def _check_budget(budget: Any) -> None:
    if isinstance(budget, float) and not math.isfinite(budget):
        raise ValueError(f"memory_budget {budget!r} is not a finite number")


def cell_key(
    compile_key_: str, npu: str, memory_budget: Any, kvcache_num_blocks: int, resolve_code: str | None = None
) -> str:
    _check_budget(memory_budget)
    code = code_version(RESOLVE_MODULE) if resolve_code is None else resolve_code
    if type(kvcache_num_blocks) is int and (memory_budget is None or type(memory_budget) in (int, float, str)):
        # canonical_json of the dict below, spelled out (a sweep computes 10,000 of these; the
        # tests check that both spellings agree)
        text = (
            f'{{"compile":{_dumps(compile_key_)},"kind":"cell","kvcache_num_blocks":{kvcache_num_blocks},'
            f'"memory_budget":{_dumps(memory_budget)},"npu":{_dumps(npu)},"resolve_code":{_dumps(code)}}}'
        )
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    return digest(
        {
            "kind": "cell",
            "resolve_code": code,
            "compile": compile_key_,
            "npu": npu,
            "memory_budget": memory_budget,
            "kvcache_num_blocks": kvcache_num_blocks,
        }
    )


_SCALAR = json.JSONEncoder(ensure_ascii=False, allow_nan=False)  # what canonical_json writes for a scalar


def _dumps(value: Any) -> str:
    return _SCALAR.encode(value)
