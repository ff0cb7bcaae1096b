"""Sharded builds across machines (``shard=I/N``), what comes after them, and what keeps them safe.

_merge  ``shard=merge/N``: the manifest written from the shards' records on the remote, no program moved
_sweep  a Hydra sweep over ``shard``: each shard in turn, then the merge
_gc     ``gc --remote`` and the shards' records: an unmerged record keeps what it names
"""

from __future__ import annotations

from ._gc import ShardPlan, plan_shards
from ._merge import merge
from ._sweep import sharded_sweep, sweeps_shards

__all__ = ["ShardPlan", "merge", "plan_shards", "sharded_sweep", "sweeps_shards"]
