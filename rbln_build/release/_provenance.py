"""Where a release came from: every input its cells' manifest records, rbln-build's version, and the
project's git commit (and whether its tree was clean, the build directory and the release aside).

Nothing here depends on the time or on an absolute path: the same build gives the same provenance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import rbln_build

from ._git import git_state

__all__ = ["provenance_for"]


def _distinct(values: list[Any]) -> list[Any]:
    seen: dict[str, Any] = {}
    for v in values:
        seen.setdefault(json.dumps(v, sort_keys=True), v)
    return [seen[k] for k in sorted(seen)]


def provenance_for(
    manifest: dict[str, Any], cells: list[str], project_root: Path, exclude: tuple[Path, ...] = ()
) -> dict[str, Any]:
    inputs = [manifest["cells"][c].get("inputs") or {} for c in cells]
    recipes: dict[str, Any] = {}
    for i in inputs:
        recipes.setdefault(
            str(i.get("recipe")), {"recipe_hash": i.get("recipe_hash"), "weights_hash": i.get("weights_hash")}
        )
    return {
        "rbln_build": rbln_build.__version__,
        "manifest_schema_version": manifest.get("schema_version"),
        "recipes": recipes,
        "devices": {str(i.get("device")): {"npu": i.get("npu"), "num_devices": i.get("num_devices")} for i in inputs},
        "backends": sorted({str(i.get("backend")) for i in inputs}),
        "toolchains": _distinct([i.get("toolchain") for i in inputs]),
        "code": _distinct([i.get("code") for i in inputs]),
        "build_options": _distinct([i.get("build_options") for i in inputs]),
        "budgets": _distinct([i.get("memory_budget") for i in inputs]),
        "deployments": sorted(manifest.get("deployments") or {}),
        "git": git_state(project_root, exclude),
    }
