"""A Ray compile task's scratch folder on its node, and the ones interrupted tasks left there.

A task compiles in ``<node TMPDIR>/rbln-build-ray-<host>-<pid>-<random>`` and removes it in ``finally``.
A task stopped hard (``ray.cancel(force=True)`` after Ctrl-C on the driver, a worker killed by Ray
when its driver went away, the OOM killer) runs no ``finally``: its folder stays. So the build first
cancels gently (Ray raises KeyboardInterrupt in the task, whose ``finally`` runs; ``close`` in
``_ray`` waits a moment before it forces), and every task, when it starts, removes the scratch
folders on its node whose process is gone (``sweep``). The name carries the host and the pid of the
worker that made it; only folders of that exact form with this host's name are touched (a TMPDIR
shared by several hosts keeps the others' folders), and only when no process has that pid (a pid
reused by another process keeps its folder until that one ends too). Ray's gentle cancel raises
KeyboardInterrupt only when the task's thread runs Python again (a compile inside one long C call,
or ``time.sleep``, does not see it), so when the driver had to force, it also runs a sweep on
every node at once (``sweep_every_node``). A private cluster (``executor.address=local``) runs on
the driver's machine: the driver sweeps there after it stops it.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["scratch_folder", "sweep", "sweep_every_node", "PREFIX"]

PREFIX = "rbln-build-ray-"


def _host() -> str:
    """This host's name as a folder name may hold it."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


def scratch_folder() -> Path:
    """A new scratch folder for this task, named with this process's pid."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{_host()}-{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def sweep(base: str | None = None) -> list[str]:
    """Remove the scratch folders under ``base`` (this process's temp dir) whose process is gone;
    the names removed."""
    root = Path(base or tempfile.gettempdir())
    name = re.compile(re.escape(f"{PREFIX}{_host()}-") + r"(\d+)-[A-Za-z0-9_]+")
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        match = name.fullmatch(entry.name)
        if match is None or int(match.group(1)) == os.getpid() or _alive(int(match.group(1))):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    return removed


def sweep_for_a_while(seconds: float = 2.0) -> list[str]:
    """``sweep`` now and again until ``seconds`` have passed (a worker Ray was told to kill may
    take a moment to go); the names removed."""
    removed = sweep()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.25)
        removed += sweep()
    return removed


def sweep_every_node(ray: Any, timeout_s: float = 10.0) -> int:
    """Run ``sweep_for_a_while`` on every alive node of the cluster (a task pinned to each, 0 CPUs):
    after tasks were killed, their scratch folders go now, not when the next build runs there.
    Returns how many folders were removed (what answered within ``timeout_s``)."""
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = ray.remote(sweep_for_a_while)
        refs = [
            task.options(
                num_cpus=0,
                max_retries=0,
                name="rbln-build sweep scratch folders",
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote()
            for node in ray.nodes()
            if node.get("Alive")
        ]
        ready, _late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        return sum(len(ray.get(ref)) for ref in ready)
    except Exception:
        return 0  # the cluster is going away as well: the next task on each node sweeps
