"""The digests a compile key holds for a recipe and a local checkpoint, recomputed from bytes.

A Ray worker checks the inputs it received against the compile key (``_task_inputs``): the recipe's
content hash and the checkpoint's weights digest, computed here exactly as ``memory`` computes them
when it loads a recipe (tests/test_task_inputs.py holds the two equal). They are spelled out here
rather than exported from ``memory`` because ``memory``'s modules are part of every backend's code
version, so any edit there changes every compile key.

Per-file sha256 on the driver are kept in this process under each file's (size, mtime, ctime,
inode): a build hashes a checkpoint once more when it ships it to Ray workers, never twice.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from .._documents import sha256_file

__all__ = ["recipe_files", "recipe_digest", "file_digests", "weights_digest"]

_seen: dict[tuple[str, int, int, int, int], str] = {}


def recipe_files(recipe: Any) -> list[str]:
    """The files of a recipe's folder its content hash covers, in hashing order: recipe.yaml,
    config.json, then the tokenizer files and the generation config recipe.yaml names."""
    companions = [*(recipe.tokenizer_files or ()), *([recipe.generation_config] if recipe.generation_config else [])]
    return ["recipe.yaml", "config.json", *companions]


def recipe_digest(recipe_bytes: bytes, config_bytes: bytes, companions: list[tuple[str, bytes]]) -> str:
    """A recipe's content hash (``Recipe.content_hash``) from its files' bytes."""
    digest = hashlib.sha256()
    for part in (b"recipe.yaml\0", recipe_bytes, b"\0config.json\0", config_bytes):
        digest.update(part)
    for name, data in companions:
        digest.update(b"\0" + name.encode() + b"\0" + data)
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    st = path.stat()
    mark = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    if mark not in _seen:
        _seen[mark] = sha256_file(path)
    return _seen[mark]


def file_digests(checkpoint: Any) -> dict[str, tuple[int, str]]:
    """Each weight file of a checkpoint (``memory.inspect_checkpoint``): name -> (size, sha256 hex)."""
    return {path.name: (path.stat().st_size, _sha256(path)) for path in checkpoint.files}


def weights_digest(files: dict[str, tuple[int, str]]) -> str:
    """The checkpoint's weights digest (``Recipe.weights_hash``) from ``file_digests``."""
    h = hashlib.sha256(b"rbln-build checkpoint weights v1\0")
    for name, (size, sha) in files.items():
        h.update(f"{name}\0{size}\0{sha}\0".encode())
    return "sha256:" + h.hexdigest()
