"""Hydra launchers that run a sweep's jobs in other processes (``-m hydra/launcher=joblib ...``).

With Hydra's basic launcher every job runs in the ``rbln-build`` process, which collects the jobs'
settings and builds their cells together (``cli``). A launcher such as joblib runs each job in a
worker process instead, where the parent's list of jobs cannot be filled. There:

1. before Hydra runs, the parent makes a private sweep folder and names it (and itself) in the
   environment, which the launcher's workers inherit (``begin``);
2. each job, in its worker, composes its settings, builds its own cells under the build directory's
   lock (the same ``BuildRun``, so each compile key is compiled once: a later job finds it in the
   Store), without publishing a partial manifest, and records its overrides there (``run_job``);
3. after the launcher returns, the parent reads the records in job order, composes the same settings
   again and builds the union as the basic launcher would (``finish``): everything is in the Store by
   then, so this only merges, under the lock, and the manifest is byte for byte the basic launcher's.

A launcher whose jobs never report back (one that runs them on other machines, without this machine's
environment and build directory) is an error that says so, never an empty or partial manifest.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RblnBuildError

__all__ = ["begin", "in_worker", "run_job", "finish", "reported"]

SWEEP_ENV = "RBLN_BUILD_SWEEP"  # "<parent pid>:<sweep folder>", set by the parent for its launcher's workers
# What the launcher's jobs did, as their records say (``finish`` fills it): the merge run itself
# compiles nothing, so its summary counts the jobs' compiles and cells from here.
reported: dict[str, list[str]] = {"compiled": [], "redone": []}


def begin() -> Path:
    """Make the sweep folder and name it for the launcher's workers."""
    folder = Path(tempfile.mkdtemp(prefix="rbln-build-sweep-"))
    os.environ[SWEEP_ENV] = f"{os.getpid()}:{folder}"
    return folder


def in_worker() -> bool:
    """True in a process that a Hydra launcher started for a job of our sweep."""
    value = os.environ.get(SWEEP_ENV, "")
    pid, _, folder = value.partition(":")
    return bool(folder) and pid != str(os.getpid())


def _folder() -> Path:
    return Path(os.environ[SWEEP_ENV].partition(":")[2])


def run_job(num: int, overrides: list[str], settings: Any, error: BaseException | None) -> None:
    """In a launcher's worker: build this job's cells (under the build lock), then record the job."""
    from filelock import FileLock

    from ..colocation import expand_all
    from ..store import write_atomic
    from ._tasks import LOCK_FILE, BuildRun

    record: dict[str, Any] = {"num": num, "overrides": list(overrides), "error": None, "compiled": [], "redone": []}
    try:
        if error is not None:
            raise error
        build_dir, cells = expand_all([settings])
        if settings.scale.shard is not None:  # its shard's cells; a merge/N job builds nothing (the parent merges)
            from ..config import select_shard

            cells = select_shard(cells, settings.scale.shard)[0] if settings.scale.shard[0] else []
        build_dir.mkdir(parents=True, exist_ok=True)
        # The launcher is this sweep's parallelism: a job runs its stages in its own process (a
        # process pool inside a launcher's worker process is not reliable: loky's workers lose theirs).
        scale = settings.scale if settings.scale.executor != "local" else replace(settings.scale, jobs=1)
        with FileLock(str(build_dir / LOCK_FILE)):
            run = BuildRun(build_dir, cells, progress=settings.progress, scale=scale, publish=False)
            run.run()
        record["compiled"], record["redone"] = list(run.compiled), sorted(run.redone)
    except RblnBuildError as exc:
        record["error"] = str(exc)
    write_atomic(_folder() / f"{num:06d}.json", json.dumps(record).encode("utf-8"))


def finish(folder: Path, project: Any = None) -> list[Any] | None:
    """In the parent, after the launcher returned: the jobs' settings in job order (None when no job
    ran in another process). Raises ConfigError for a job's configuration error."""
    from ..config import compose_settings

    try:
        records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(SWEEP_ENV, None)
    if not records:
        return None
    for r in records:
        if r["error"]:
            raise RblnBuildError(f"sweep job {r['num']} ({' '.join(r['overrides'])}): {r['error']}")
    for r in records:
        reported["compiled"].extend(k for k in r.get("compiled", []) if k not in reported["compiled"])
        reported["redone"].extend(c for c in r.get("redone", []) if c not in reported["redone"])
    return [compose_settings(r["overrides"], project=project) for r in records]


def no_report_error(argv: list[str]) -> ConfigError:
    launcher = next((a.split("=", 1)[1] for a in argv if a.startswith("hydra/launcher=")), "the configured launcher")
    return ConfigError(
        f"hydra/launcher={launcher}: the sweep's jobs ran outside this process and none reported back, so "
        "nothing was built. rbln-build supports launchers that run jobs as processes on this machine "
        "(basic, joblib); for several machines use executor=ray, or one rbln-build per machine with cache.remote."
    )
