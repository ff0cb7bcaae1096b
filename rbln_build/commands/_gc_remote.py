"""``rbln-build gc --remote [--dry-run] [--json] [--min-age SECONDS] MANIFEST... [overrides]``, and the
remote cache ``rbln-build release`` copies a merge's cells from (``release_main``).

Cleans the remote cache (``cache.remote``, with its ``cache.*`` options, from the composed config):

* kept: the pointers every given manifest references (each cell's compile key, and the artifact key
  of each cell that has an artifact: its compile key, target NPU and block count), and the blobs
  those pointers name;
* removed: every other pointer, every blob no kept pointer names (orphans: a replaced or lost
  pointer's blob), and every temporary under ``tmp/``;
* anything modified less than ``--min-age`` seconds ago (default 3600) is kept and counted as young:
  a build uploading right now publishes its blob before its pointer, and its temporaries are in use;
* shards' records (``shards/``, ``_shards._gc``): one not yet merged (a cell of it in no given
  manifest) is kept with every pointer it names; a merged one older than ``--min-age`` is removed;
* compile inputs (``inputs/<sha256>``: weight files a Ray build put there for its workers) are needed
  only while a build runs (the next build uploads what is absent): each one older than ``--min-age``
  is removed, and reported under its own heading (``inputs`` in ``--json``).

Pointers go before blobs, so a reader never finds a kept pointer without its blob. Nothing is
removed without at least one manifest (a gc that keeps nothing is refused), and a manifest that
cannot be read stops gc before anything is removed. Names that are not ours (not a key or a digest;
in ``inputs/``, anything but a file named by a sha256) are reported and left alone. ``--dry-run``
reports the same and removes nothing.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._documents import read_file
from ..errors import ConfigError
from ..store import INPUTS_DIR, bounded, is_key, open_filesystem
from ._shards import plan_shards

__all__ = ["RemotePlan", "referenced", "plan_remote_gc", "main", "release_main"]

POINTER_KINDS = ("compile", "artifacts")
DEFAULT_MIN_AGE_S = 3600.0


@dataclass
class RemotePlan:
    remove: list[tuple[str, str, int]] = field(default_factory=list)  # (kind, path under the base, bytes)
    kept: dict[str, int] = field(default_factory=dict)  # kind -> how many stay
    young: int = 0  # newer than --min-age: kept
    notes: list[str] = field(default_factory=list)
    inputs: list[tuple[str, int]] = field(default_factory=list)  # (path under the base, bytes): removed
    inputs_young: int = 0  # compile inputs newer than --min-age: kept


def referenced(manifests: list[Path]) -> dict[str, set[str]]:
    """The compile and artifact keys the manifests reference. Raises ConfigError on an unreadable one."""
    from ..execution import artifact_key_of

    keys: dict[str, set[str]] = {"compile": set(), "artifacts": set(), "cells": set()}
    for path in manifests:
        try:
            cells = json.loads(read_file(path))["cells"]  # bounded: a FIFO, a device or a huge file is refused
            if not isinstance(cells, dict):
                raise TypeError("'cells' is not a mapping")
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise ConfigError(
                f"{path}: not a readable rbln-build manifest ({exc}); gc --remote removes nothing without it."
            ) from None
        for cid, entry in cells.items():
            cell_key = entry.get("cell_key") if isinstance(entry, dict) else None
            if isinstance(cell_key, str):
                keys["cells"].add(cell_key)  # a shard's record of this cell is merged (_shards._gc)
            ckey = entry.get("compile_key") if isinstance(entry, dict) else None
            if not isinstance(ckey, str) or not is_key(ckey):
                continue
            keys["compile"].add(ckey)
            blocks, npu = entry.get("kvcache_num_blocks"), (entry.get("inputs") or {}).get("npu")
            if entry.get("artifact") is not None:
                if not isinstance(blocks, int) or not isinstance(npu, str):
                    raise ConfigError(f"{path}: cell {cid!r} has an artifact but no block count or npu to key it by.")
                keys["artifacts"].add(artifact_key_of(ckey, npu, blocks))
    return keys


def _is_digest(name: str) -> bool:
    return len(name) == 64 and all(c in "0123456789abcdef" for c in name)


def _age(info: dict[str, Any], now: float) -> float:
    stamp = info.get("mtime", info.get("LastModified", info.get("created")))
    if isinstance(stamp, datetime.datetime):
        stamp = stamp.timestamp()
    try:
        return now - float(stamp)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("inf")  # no time known: old enough


def _listing(fs: Any, folder: str, timeout: float, folders: bool = False) -> list[dict[str, Any]]:
    try:
        return [i for i in bounded(timeout, fs.ls, folder, detail=True) if folders or i.get("type") != "directory"]
    except FileNotFoundError:
        return []


def _plan_inputs(plan: RemotePlan, fs: Any, base: str, min_age: float, now: float, timeout: float) -> None:
    """Compile inputs older than ``min_age``: only files named by a sha256 (what ``publish_input`` makes)."""
    for info in _listing(fs, f"{base}/{INPUTS_DIR}", timeout, folders=True):
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        if info.get("type") != "file" or not _is_digest(name):
            what = "a folder" if info.get("type") == "directory" else "not a name rbln-build makes"
            plan.notes.append(f"{INPUTS_DIR}/{name} is {what}; left alone")
        elif _age(info, now) < min_age:
            plan.inputs_young += 1
        else:
            plan.inputs.append((f"{INPUTS_DIR}/{name}", int(info.get("size") or 0)))


def plan_remote_gc(fs: Any, base: str, keep: dict[str, set[str]], min_age: float, timeout: float) -> RemotePlan:
    plan = RemotePlan()
    now = time.time()
    named: set[str] = set()
    for kind in POINTER_KINDS:
        plan.kept[kind] = 0
        for info in _listing(fs, f"{base}/{kind}", timeout):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if not is_key(name):
                plan.notes.append(f"{kind}/{name} is not a name rbln-build makes; left alone")
                continue
            stays = name in keep[kind] or _age(info, now) < min_age
            if stays:
                plan.kept[kind] += 1
                plan.young += name not in keep[kind]
                try:
                    pointer = json.loads(bounded(timeout, fs.cat_file, f"{base}/{kind}/{name}"))
                    named.add(str(pointer["blob"]))
                except (ValueError, KeyError, TypeError):
                    plan.notes.append(f"{kind}/{name} is an unreadable pointer; kept (a build repairs it)")
            else:
                plan.remove.append((kind, f"{kind}/{name}", int(info.get("size") or 0)))
    plan.kept["blobs"] = 0
    for info in _listing(fs, f"{base}/blobs", timeout):
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        if not _is_digest(name):
            plan.notes.append(f"blobs/{name} is not a name rbln-build makes; left alone")
        elif name in named:
            plan.kept["blobs"] += 1
        elif _age(info, now) < min_age:
            plan.kept["blobs"] += 1
            plan.young += 1
        else:
            plan.remove.append(("blob", f"blobs/{name}", int(info.get("size") or 0)))
    for info in _listing(fs, f"{base}/tmp", timeout):
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        if _age(info, now) < min_age:
            plan.young += 1
        else:
            plan.remove.append(("tmp", f"tmp/{name}", int(info.get("size") or 0)))
    _plan_inputs(plan, fs, base, min_age, now, timeout)
    return plan


def _parse(argv: list[str]) -> tuple[bool, bool, float, list[Path], list[str]]:
    dry, as_json, min_age = False, False, DEFAULT_MIN_AGE_S
    manifests: list[Path] = []
    overrides: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--dry-run":
            dry = True
        elif a == "--json":
            as_json = True
        elif a == "--min-age" or a.startswith("--min-age="):
            value = a.split("=", 1)[1] if "=" in a else next(it, None)
            try:
                min_age = float(value)  # type: ignore[arg-type]
                if min_age < 0:
                    raise ValueError
            except (TypeError, ValueError):
                raise ConfigError(f"--min-age: expected a number of seconds (0 or more), got {value!r}.") from None
        elif a.startswith("-") or "=" in a:
            overrides.append(a)
        else:
            manifests.append(Path(a))
    return dry, as_json, min_age, manifests, overrides


def main(argv: list[str]) -> int:
    from ._build import compose

    dry, as_json, min_age, manifests, overrides = _parse(argv)
    if not manifests:
        raise ConfigError(
            "gc --remote: give the manifests whose entries to keep (e.g. released/manifest.json build/manifest.json); "
            "without one it would remove everything."
        )
    for m in manifests:
        if not m.is_file():
            raise ConfigError(f"gc --remote: {m}: no such manifest.")
    keep = referenced(manifests)
    jobs = compose(overrides, prog="rbln-build gc")
    if jobs is None:
        return 0
    scale = jobs[0].scale
    if scale.remote is None:
        raise ConfigError("gc --remote: no remote cache configured; set cache.remote=URL (as the builds do).")
    options = scale.remote_options
    if not options.writes:
        raise ConfigError("gc --remote: cache.remote_mode=read never deletes; run gc where the cache is written.")
    fs, base = open_filesystem(scale.remote, options)
    timeout = options.call_timeout
    try:
        shards = plan_shards(fs, base, keep["cells"], min_age, timeout, _age)  # before any removal
        for kind in POINTER_KINDS:  # what an unmerged shard's records name: a merge still needs it
            keep[kind] |= shards.keep[kind]
        plan = plan_remote_gc(fs, base, keep, min_age, timeout)
        plan.notes += shards.notes
        plan.remove += [("shard", rel, n) for rel, n in shards.remove]
        if not dry:
            # pointers first: a kept pointer never names a removed blob, a reader never half-finds one
            removals = [rel for _k, rel, _n in sorted(plan.remove, key=lambda r: r[0] in ("blob", "tmp"))]
            for rel in removals + [rel for rel, _n in plan.inputs]:
                try:
                    bounded(timeout, fs.rm_file, f"{base}/{rel}")
                except FileNotFoundError:
                    pass
    except (OSError, TimeoutError) as exc:
        print(f"rbln-build gc: cache.remote: {scale.remote} failed ({type(exc).__name__}: {exc}); run it again.")
        return 1
    freed = sum(n for _k, _r, n in plan.remove)
    inputs_freed = sum(n for _r, n in plan.inputs)
    if as_json:
        print(
            json.dumps(
                {
                    "dry_run": dry,
                    "remote": scale.remote,
                    "bytes": freed + inputs_freed,
                    "kept": plan.kept,
                    "young": plan.young,
                    "notes": plan.notes,
                    "shards": {"unmerged": shards.unmerged, "young": shards.young},
                    "removed": [{"kind": k, "path": r, "bytes": n} for k, r, n in plan.remove],
                    "inputs": {
                        "bytes": inputs_freed,
                        "young": plan.inputs_young,
                        "removed": [{"path": r, "bytes": n} for r, n in plan.inputs],
                    },
                },
                indent=2,
                sort_keys=True,
            )
        )
        return 0
    verb = "would remove" if dry else "removed"
    for kind, rel, n in plan.remove:
        print(f"{verb} {kind:9} {rel}  ({n:,} bytes)")
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr)
    counts: dict[str, int] = {}
    for kind, _r, _n in plan.remove:
        counts[kind] = counts.get(kind, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing"
    kept = ", ".join(f"{n} {k}" for k, n in plan.kept.items())
    print(
        f"{verb} {summary}: {freed:,} bytes{' (dry run: nothing removed)' if dry else ' freed'} in {scale.remote}; "
        f"kept {kept} ({plan.young} younger than {min_age:g}s)."
    )
    if shards.unmerged:  # kept, with every entry they name: a merge still needs them
        print(
            f"kept {len(shards.unmerged)} unmerged shard record(s) and the entries they name (their cells are in "
            f"no given manifest; merge with shard=merge/N, or remove the record): {', '.join(shards.unmerged)}"
        )
    print(f"compile inputs ({INPUTS_DIR}/: weight files for Ray workers, needed only while a build runs):")
    for rel, n in plan.inputs:
        print(f"{verb} input     {rel}  ({n:,} bytes)")
    print(
        f"{verb} {len(plan.inputs)} input: {inputs_freed:,} bytes{' (dry run: nothing removed)' if dry else ' freed'}; "
        f"kept {plan.inputs_young} younger than {min_age:g}s."
    )
    return 0


def release_main(argv: list[str]) -> int:
    """``rbln-build release``: the release command, given the remote cache of the composed config
    (``cache.*`` with the command line's ``cache.KEY=VALUE``), composed only when a selected cell has
    no program in the build dir (a merge's): the cells are copied from it, with the build's credential
    options (``release._remote_source``)."""
    from ..release import release_main as release

    return release(argv, _remote_of)


def _remote_of(overrides: list[str], project: str | None) -> tuple[str, Any] | None:
    from ._build import compose

    jobs = compose([*(["--project", project] if project else []), *overrides], prog="rbln-build release")
    if not jobs or jobs[0].scale.remote is None:
        return None
    return str(jobs[0].scale.remote), jobs[0].scale.remote_options
