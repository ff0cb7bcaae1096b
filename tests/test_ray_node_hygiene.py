"""The parts of a Ray build that run on a node, without a cluster (fast): a task's scratch folders
left by workers that are gone are swept, nothing else is; the remote cache's credentials, carried
as a task argument, print as names only and live in the process's environment only while a task
runs. (tests/test_ray_cluster_ops.py checks both on a real two-node cluster.)"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from rbln_build.execution._cluster import Credentials, carried, scratch_folder, sweep
from rbln_build.execution._cluster._scratch import _host


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has it (until the kernel reuses it)


def test_sweep_removes_only_scratch_folders_whose_worker_is_gone(tmp_path: Path) -> None:
    dead, alive, host = _dead_pid(), os.getppid(), _host()
    gone = tmp_path / f"rbln-build-ray-{host}-{dead}-abc123"
    (gone / "cache").mkdir(parents=True)
    (gone / "cache" / "x.bin").write_bytes(b"x" * 10)
    kept = [
        tmp_path / f"rbln-build-ray-{host}-{alive}-def456",  # its worker still runs
        tmp_path / f"rbln-build-ray-{host}-{os.getpid()}-ghi789",  # this process's own
        tmp_path / f"rbln-build-ray-other.host-{dead}-abc123",  # another host's (a shared TMPDIR)
        tmp_path / "rbln-build-ray-notapid",  # not our name form
        tmp_path / f"other-{dead}-abc",  # not ours at all
    ]
    for folder in kept:
        folder.mkdir()
    link = tmp_path / f"rbln-build-ray-{host}-{dead}-link"
    link.symlink_to(kept[-1])  # a link of our name form: never followed, never removed
    assert sweep(str(tmp_path)) == [gone.name]
    assert not gone.exists() and all(f.is_dir() for f in kept) and link.is_symlink()


def test_a_scratch_folder_carries_its_workers_pid(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = scratch_folder()
    assert folder.parent == tmp_path and folder.name.startswith(f"rbln-build-ray-{_host()}-{os.getpid()}-")
    assert sweep(str(tmp_path)) == [] and folder.is_dir()  # this process's own: kept


def test_credentials_print_names_only_and_apply_while_a_task_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_KEY", "node-own-value")
    monkeypatch.delenv("NODE_SECRET", raising=False)
    monkeypatch.setenv("DRIVER_KEY", "sekrit-key-1")
    monkeypatch.setenv("DRIVER_SECRET", "sekrit-secret-2")
    creds = carried(("DRIVER_KEY", "DRIVER_SECRET", "UNSET_NAME"))
    assert creds is not None and dict(creds.values) == {
        "DRIVER_KEY": "sekrit-key-1",
        "DRIVER_SECRET": "sekrit-secret-2",
    }
    for text in (repr(creds), str(creds), f"{creds!r} {[creds]}"):
        assert "sekrit" not in text and "DRIVER_KEY" in text
    again = pickle.loads(pickle.dumps(creds))  # as Ray carries it
    moved = Credentials((("NODE_KEY", "from-driver"), ("NODE_SECRET", "s")))
    with again.applied(), moved.applied():
        assert os.environ["DRIVER_KEY"] == "sekrit-key-1" and os.environ["NODE_KEY"] == "from-driver"
        assert os.environ["NODE_SECRET"] == "s"
    assert os.environ["NODE_KEY"] == "node-own-value" and "NODE_SECRET" not in os.environ
    with pytest.raises(RuntimeError), moved.applied():
        raise RuntimeError("a failing compile")
    assert os.environ["NODE_KEY"] == "node-own-value" and "NODE_SECRET" not in os.environ
    assert carried(("UNSET_NAME",)) is None
