"""Where a release came from: every input its cells' manifest records, rbln-build's version, and the
project's git commit (and whether its tree was clean, the build directory and the release aside).

Nothing here depends on the time or on an absolute path: the same build gives the same provenance.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import rbln_build

__all__ = ["provenance_for", "git_state"]


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


def git_state(root: Path, exclude: tuple[Path, ...] = ()) -> dict[str, Any]:
    """{"commit": sha, "clean": bool} of the git work tree holding ``root``, or commit None and why.
    ``exclude``: folders (the build directory, a local release destination) the clean check ignores."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)

    try:
        top = git("rev-parse", "--show-toplevel")
    except FileNotFoundError:
        return {"commit": None, "clean": None, "note": "git is not installed"}
    except subprocess.TimeoutExpired:
        return {"commit": None, "clean": None, "note": "git did not answer in 30 s"}
    if top.returncode != 0:
        return {"commit": None, "clean": None, "note": "the project is not in a git repository"}
    head = git("rev-parse", "--verify", "-q", "HEAD")
    if head.returncode != 0:
        return {"commit": None, "clean": None, "note": "the git repository has no commit yet"}
    toplevel = Path(top.stdout.strip()).resolve()
    specs = [":(top)"]
    for path in exclude:
        try:
            rel = path.resolve().relative_to(toplevel)
        except ValueError:
            continue
        if rel.parts:
            specs.append(f":(exclude,top){rel.as_posix()}")
    status = git("status", "--porcelain", "--untracked-files=normal", "--", *specs)
    return {"commit": head.stdout.strip(), "clean": status.returncode == 0 and not status.stdout.strip()}
