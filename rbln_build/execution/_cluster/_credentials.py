"""The remote cache's credentials, carried to a Ray task by a channel Ray does not write down.

The config names the variables that hold the cache's key, secret and token (``cache.key_env`` ...);
a worker node started without them must still reach the cache. Ray writes a task's ``runtime_env``
(its ``env_vars`` with their values) in plain text to every worker node's
``runtime_env_agent.log`` and keeps it in the cluster's task records, so the values never go
there. They travel as one small argument of the task instead: Ray inlines an argument under
100 KiB in the task's message to the worker rather than putting it in the object store, and logs
no argument (tests/test_ray_cluster_ops.py greps every file of both nodes' Ray folders for
marker values), and the task sets the variables in its own process only while it runs
(``Credentials.applied``), then restores what was there. Its ``repr`` shows names, never values,
so an error message or a log line that prints the task's arguments cannot leak them.

A variable the driver does not have set is not carried: a node whose own environment holds it
(the environment of its ``ray start``) then uses its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Credentials", "carried"]


@dataclass(frozen=True)
class Credentials:
    """Named variables and their values; printed with names only."""

    values: tuple[tuple[str, str], ...] = field(repr=False)

    def __repr__(self) -> str:
        return f"Credentials({', '.join(n for n, _ in self.values)}; values hidden)"

    @contextmanager
    def applied(self) -> Iterator[None]:
        """This process's environment holds the values while the block runs; then what was there."""
        saved = {name: os.environ.get(name) for name, _ in self.values}
        try:
            os.environ.update(dict(self.values))
            yield
        finally:
            for name, old in saved.items():
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old


def carried(names: tuple[str, ...]) -> Credentials | None:
    """The values of the named variables set in this process (None when none is)."""
    values = tuple((n, os.environ[n]) for n in names if os.environ.get(n))
    return Credentials(values) if values else None
