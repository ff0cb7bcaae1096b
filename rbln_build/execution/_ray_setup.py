"""Before ``ray.init`` of a private cluster: a temp dir whose socket paths fit.

Ray puts its Unix sockets under ``<temp dir>/session_<date>_<time>_<pid>/sockets/`` and Linux
limits a socket path to 107 bytes, so a private cluster under a long ``RAY_TMPDIR`` or ``TMPDIR``
(a CI workspace, a pytest folder) cannot start. A private cluster then gets a short folder of its
own under ``/tmp`` instead, removed when the build ends.

Token authentication (decided from the cluster a driver joins), the remote cache's credentials
for the workers and their scratch folders are in ``_cluster``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..errors import ConfigError

__all__ = ["short_temp_dir", "remove_temp_dir", "MAX_TEMP_DIR"]

# 107 bytes, less "/session_2026-12-01_04-18-24_123456_1234567/sockets/" (52) and the longest socket
# name Ray uses there ("plasma_store", "raylet", with room to spare: 16).
MAX_TEMP_DIR = 107 - 52 - 16


def _chosen_temp_dir() -> str:
    """Where Ray would put a private cluster's files (its own rule: RAY_TMPDIR, TMPDIR, /tmp)."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, "ray")


def short_temp_dir() -> str | None:
    """A short private folder for a private cluster when Ray's own choice is too long; else None."""
    if len(_chosen_temp_dir()) <= MAX_TEMP_DIR:
        return None
    for base in ("/tmp", "/var/tmp", str(Path.home())):
        try:
            folder = tempfile.mkdtemp(prefix="rbr-", dir=base)
        except OSError:
            continue
        if len(folder) <= MAX_TEMP_DIR:
            return folder
        shutil.rmtree(folder, ignore_errors=True)
    raise ConfigError(
        f"executor=ray: Ray's folder {_chosen_temp_dir()} is too long for its Unix sockets (a path may hold "
        f"107 bytes) and no short folder could be made in /tmp; set RAY_TMPDIR to a path of at most "
        f"{MAX_TEMP_DIR - 4} characters."
    )


def remove_temp_dir(folder: str | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
