"""A Hydra sweep over ``shard`` (``rbln-build -m ... shard=1/2,2/2``): every shard, then the merge.

A sweep builds the union of its jobs' cells in one run, but a shard is a selection of the whole
matrix, not a set of cells: the union of ``shard=1/2`` and ``shard=2/2`` is not "half the keys
twice". So the jobs are grouped by their ``shard`` value and each group runs as the shard it names,
in order, in the sweep's one build directory, each uploading its results to ``cache.remote`` as a
shard on its own machine would. Then:

* every shard of ``N`` ran (``1/N .. N/N``, whether or not ``merge/N`` is in the sweep too): the
  merge runs (``shard=merge/N``, ``_merge``): it writes the one manifest of the whole matrix from
  the shards' records on the remote, never compiles, and names what a shard left missing (exit 1);
* some shards of ``N`` did not run in this sweep: no merge (it could only name them missing), and one
  line names the shards left and the merge command to run after them;
* ``merge/N`` alone with some of the shards: the merge runs after them and names what is missing.

One sweep has one ``N``, and every job a shard (a sweep of sharded and unsharded builds is refused):
exit 2. The exit status is the worst of the shards' and the merge's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...errors import ConfigError

__all__ = ["sharded_sweep", "sweeps_shards"]


def sweeps_shards(jobs: list[Any]) -> bool:
    """Whether the jobs name more than one ``shard`` value (a sweep over shards)."""
    return len({j.scale.shard for j in jobs}) > 1


def _shown(shard: tuple[int, int]) -> str:
    return f"merge/{shard[1]}" if shard[0] == 0 else f"{shard[0]}/{shard[1]}"


def sharded_sweep(jobs: list[Any], build: Callable[[list[Any]], int], argv: list[str]) -> int:
    """Run each shard group of ``jobs`` with ``build`` (the build command's one-run build), then the
    merge when every shard ran; the exit status. ``argv``: the command line, for the merge hint."""
    values = {j.scale.shard for j in jobs}
    if None in values:
        raise ConfigError(
            "shard: this sweep mixes sharded jobs with a job without shard; sweep shard=1/N,...,N/N (and "
            "merge/N) alone, or build the whole matrix without shard."
        )
    counts = sorted({shard[1] for shard in values})
    if len(counts) > 1:
        raise ConfigError(
            f"shard: one sweep's shards split the matrix one way; got N = {', '.join(map(str, counts))} "
            f"({', '.join(_shown(s) for s in sorted(values))}): sweep shard=1/N,...,N/N with one N."
        )
    count = counts[0]
    indexes = sorted(shard[0] for shard in values if shard[0] != 0)
    code = 0
    for index in indexes:
        group = [j for j in jobs if j.scale.shard == (index, count)]
        code = max(code, build(group))
    everyone = indexes == list(range(1, count + 1))
    if not everyone and (0, count) not in values:
        left = [f"{i}/{count}" for i in range(1, count + 1) if i not in indexes]
        merge = " ".join([a for a in argv if a not in ("-m", "--multirun") and not a.startswith("shard=")])
        print(
            f"rbln-build: this sweep ran shard(s) {', '.join(f'{i}/{count}' for i in indexes)}; after "
            f"{', '.join(left)} ran with the same cache.remote, merge them: rbln-build {merge} shard=merge/{count}".rstrip(),
            file=sys.stderr,
        )
        return code
    merged = [j for j in jobs if j.scale.shard == (0, count)] or [
        replace(j, scale=replace(j.scale, shard=(0, count))) for j in jobs if j.scale.shard == (indexes[0], count)
    ]
    print(f"the sweep ran shard(s) {', '.join(f'{i}/{count}' for i in indexes) or 'none'} of {count}: the merge")
    return max(code, build(merged))
