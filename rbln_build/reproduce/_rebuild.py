"""Rebuild a release's cells from this checkout: the matrix that makes exactly those cells (each
cell's model, device, budget, explicit count and the build options its id says the matrix set),
built by ``rbln-build`` itself in a fresh build directory, then staged as a release by the release
code (``rbln_build.release._bundle.stage_release``), so every file the release holds, its model
cards included, is made again the way the release made it.

The build runs as its own process (the real CLI, as a user would run it) with the project's remote
cache off and the memory model's inventories kept under the fresh build directory: nothing built
before is reused.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError

__all__ = ["Rebuild", "matrix_overrides", "rebuild"]

_OPTIONS = (("batch_size", "bs"), ("max_seq_len", "s"), ("attn_impl", ""), ("kvcache_partition_len", "p"))
_AXES = {"batch_size": "batch_sizes", "max_seq_len": "max_seq_lens"}


def _hydra(value: Any) -> str:
    """``value`` in Hydra's override grammar, its type kept (``1`` bytes is not ``1.0``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"{value!r} has no override form")


def _entry(cid: str, record: dict[str, Any]) -> dict[str, Any]:
    """The sub-matrix that makes exactly cell ``cid``: which options its id says the matrix set."""
    from ..estimator import format_budget

    found = record.get("inputs")
    inputs: dict[str, Any] = found if isinstance(found, dict) else {}
    model, device = inputs.get("model"), inputs.get("device")
    budget, blocks = inputs.get("memory_budget"), inputs.get("kvcache_num_blocks") or 0
    recorded = inputs.get("build_options")
    options: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    if not isinstance(model, str) or not isinstance(device, str) or not isinstance(blocks, int):
        raise UserError(
            f"release.json: cell {cid}'s record has no model, device or count in its inputs; it cannot be rebuilt."
        )
    head = f"{model}.{device}"
    tail = f".b{format_budget(budget)}" + (f".n{blocks}" if blocks else "")
    if not cid.startswith(head) or not cid.endswith(tail):
        raise UserError(f"release.json: cell id {cid} does not name its model {model}, device {device} and budget.")
    middle = cid[len(head) : len(cid) - len(tail)]
    for chosen in itertools.product((False, True), repeat=len(_OPTIONS)):
        parts = [f"{mark}{options.get(key)}" for (key, mark), on in zip(_OPTIONS, chosen, strict=True) if on]
        if "".join("." + p for p in parts) == middle and all(
            options.get(key) is not None for (key, _), on in zip(_OPTIONS, chosen, strict=True) if on
        ):
            set_ = {key for (key, _), on in zip(_OPTIONS, chosen, strict=True) if on}
            break
    else:
        raise UserError(f"release.json: cell id {cid}'s options ({middle!r}) do not match its record's {options}.")
    entry: dict[str, Any] = {
        "models": [model],
        "devices": [device],
        "budgets": [budget],
        "kvcache_num_blocks": [blocks],
    }
    for key, axis in _AXES.items():
        entry[axis] = [options[key]] if key in set_ else None
    for key in ("attn_impl", "kvcache_partition_len"):
        entry[key] = options[key] if key in set_ else None
    return entry


def matrix_overrides(records: dict[str, dict[str, Any]]) -> list[str]:
    """Hydra overrides whose matrix is exactly these cells (the first as the main matrix, the others
    as ``include`` entries), with the release's backend and no declared failure."""
    backends = sorted({str((r.get("inputs") or {}).get("backend")) for r in records.values()})
    if len(backends) != 1:
        raise UserError(
            f"the selected cells were built with several backends ({', '.join(backends)}); reproduce them one "
            "backend at a time with --cells GLOB."
        )
    entries = [_entry(cid, records[cid]) for cid in sorted(records)]
    first, rest = entries[0], entries[1:]
    out = [f"matrix.backend={_hydra(backends[0])}", "matrix.expect_failure=[]"]
    out += [f"matrix.{k}={_hydra(v)}" for k, v in first.items()]
    out.append(f"matrix.include={_hydra(rest)}")
    return out


@dataclass
class Rebuild:
    build_dir: Path
    returncode: int
    stdout: str
    stderr: str


def rebuild(root: Path, records: dict[str, dict[str, Any]], build_dir: Path, extra: list[str]) -> Rebuild:
    """Build ``records``' cells from the project at ``root`` into ``build_dir`` (fresh) with the real CLI."""
    overrides = matrix_overrides(records)
    command = [
        sys.executable,
        "-m",
        "rbln_build.cli",
        "build",
        f"build_dir={build_dir}",
        "progress=false",
        "cache.remote=null",
        "shard=null",
        *overrides,
        *extra,
    ]
    env = dict(os.environ, RBLN_BUILD_PROJECT=str(root), RBLN_BUILD_CACHE=str(build_dir / "cache"))
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    return Rebuild(build_dir, proc.returncode, proc.stdout, proc.stderr)


def rebuilt_records(build_dir: Path) -> dict[str, Any]:
    manifest = json.loads((build_dir / "manifest.json").read_text(encoding="utf-8"))
    return manifest["cells"]  # type: ignore[no-any-return]
