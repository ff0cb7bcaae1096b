"""``gc --remote`` and the shards' records: what a merge still needs is kept, a merged record goes.

A shard (``shard=I/N``) leaves its cells' results in ``<url>/shards/<digest>.json.gz`` for the merge
(``shard=merge/N``), which takes each record's word that its compile entry and artifact are on the
remote. A ``gc --remote`` between the shards and the merge, given only older manifests, would remove
those entries, and the merge would then write a manifest naming programs that are gone. So:

* a record is **merged** when every cell it lists is in a given manifest (by cell key): the manifest
  keeps what it needs, and the record is removed once it is older than ``--min-age``;
* any other record is **unmerged**: it stays, and so do the compile and artifact pointers of its
  cells (and their blobs). A record of a sharded build that will never be merged keeps its entries
  until it is merged or removed by hand (its path is printed);
* a record that cannot be read (not a shard's results) stops gc before anything is removed: what it
  protects cannot be told. Names that are not ``<sha256>.json.gz`` are ours neither: left alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError
from ...store import MAX_SHARD_BYTES, SHARDS_DIR, bounded, decode_shard, is_key

__all__ = ["ShardPlan", "plan_shards"]

_SUFFIX = ".json.gz"


@dataclass
class ShardPlan:
    keep: dict[str, set[str]] = field(default_factory=lambda: {"compile": set(), "artifacts": set()})
    remove: list[tuple[str, int]] = field(default_factory=list)  # merged records: (path under the base, bytes)
    unmerged: list[str] = field(default_factory=list)  # paths under the base: kept, with their entries
    young: int = 0  # merged records newer than --min-age: kept
    notes: list[str] = field(default_factory=list)


def plan_shards(fs: Any, base: str, merged_cells: set[str], min_age: float, timeout: float, age: Any) -> ShardPlan:
    """The plan for ``<base>/shards/``; ``merged_cells``: the cell keys of the given manifests;
    ``age(info, now)``: an entry's age in seconds. Raises ConfigError for a record that cannot be read."""
    plan = ShardPlan()
    now = time.time()
    try:
        listing = bounded(timeout, fs.ls, f"{base}/{SHARDS_DIR}", detail=True)
    except FileNotFoundError:
        return plan
    for info in listing:
        name = info["name"].rstrip("/").rsplit("/", 1)[-1]
        rel = f"{SHARDS_DIR}/{name}"
        if info.get("type") != "file" or not name.endswith(_SUFFIX) or not is_key(name[: -len(_SUFFIX)]):
            plan.notes.append(f"{rel} is not a name rbln-build makes; left alone")
            continue
        try:
            raw = bounded(timeout, fs.cat_file, f"{base}/{rel}", start=0, end=MAX_SHARD_BYTES + 1)
            records = decode_shard(bytes(raw))
        except FileNotFoundError:
            continue  # removed meanwhile
        except ValueError as exc:
            raise ConfigError(
                f"gc --remote: {rel} is not a shard's results ({exc}), so what it keeps for a merge cannot be told; "
                "nothing was removed. Run that shard again (it replaces the file), or remove the file."
            ) from None
        if set(records) <= merged_cells:  # (an empty record protects nothing)
            if age(info, now) < min_age:
                plan.young += 1
            else:
                plan.remove.append((rel, int(info.get("size") or 0)))
            continue
        plan.unmerged.append(rel)
        for record in records.values():
            if not isinstance(record, dict):
                continue
            for kind, field_name in (("compile", "compile_key"), ("artifacts", "artifact_key")):
                key = record.get(field_name)
                if isinstance(key, str) and is_key(key):
                    plan.keep[kind].add(key)
    return plan
