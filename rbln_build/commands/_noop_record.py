"""Recording the no-op stamp (``_noop`` explains what it holds and how a later run uses it).

``Recorder.start`` (before composing) captures what the run prints and, through an audit hook, the
files it opens for reading; ``Recorder.outputs`` (holding the build lock, after the manifest,
``summary.json`` and ``results.txt`` are written) decides whether the run was a no-op and takes the
outputs' digest; ``Recorder.finish`` (after the run) stamps the inputs and writes the stamp. Any
failure here only means no stamp: the next run takes the full path.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from ._noop import (
    RACY_NS,
    STAMP_DIR,
    TOOK,
    VERSION,
    content_digest,
    fingerprint,
    invocation_key,
    locate,
    outputs_digest,
    variant,
)

__all__ = ["Recorder"]

KEEP_STAMPS = 16  # per build directory (one per distinct invocation; the oldest go first)
_COUNTS = re.compile(r"\((\d+\.\d)s\)\. Manifest: ")  # the counts line's own time (_build)
_OPENED: set[str] | None = None  # what the current recording saw opened for reading
_HOOKED = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or _OPENED is None:
        return
    try:
        path, mode, flags = args
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return
        writes = flags & (os.O_WRONLY | os.O_RDWR) if mode is None else any(c in mode for c in "wax+")
        if not writes:
            _OPENED.add(os.path.abspath(path))
    except Exception:  # an audit hook must never fail the operation it watches
        return


class _Tee:
    """A stream that records each write (in order, with the other stream's) and passes it on."""

    def __init__(self, real: Any, number: int, chunks: list[list[Any]]) -> None:
        self._real, self._number, self._chunks = real, number, chunks

    def write(self, text: str) -> int:
        if self._chunks and self._chunks[-1][0] == self._number:
            self._chunks[-1][1] += text
        else:
            self._chunks.append([self._number, text])
        return int(self._real.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class Recorder:
    """One full build's recording (see the module docstring)."""

    def __init__(self, args: list[str], full_table: bool, root: Path, build_dir: Path) -> None:
        global _OPENED, _HOOKED
        import time

        self.args, self.root, self.build_dir = args, root, build_dir
        self.key = invocation_key(args)
        self.variant = variant(full_table)
        self.started_ns = time.time_ns()
        self.chunks: list[list[Any]] = []
        self.saved = (sys.stdout, sys.stderr)
        sys.stdout = _Tee(sys.stdout, 1, self.chunks)
        sys.stderr = _Tee(sys.stderr, 2, self.chunks)
        self.opened: set[str] = set()
        _OPENED = self.opened
        if not _HOOKED:  # one hook per process (hooks cannot be removed); idle between recordings
            sys.addaudithook(_audit)
            _HOOKED = True
        self.digest: str | None = None  # the outputs' digest, once the run turned out to be a no-op
        self.cells: list[Any] = []
        self.closed = False

    @classmethod
    def start(cls, args: list[str], full_table: bool) -> Recorder | None:
        where = locate(args)
        return None if where is None else cls(args, full_table, *where)

    def outputs(self, build_dir: Path, jobs: list[Any], build: Any, summary: dict[str, Any]) -> None:
        """Holding the lock, after every output is written: if the run was a no-op, the outputs' digest."""
        from ..pipeline import sweep_jobs as _sweep

        job = jobs[0]
        scale = job.scale
        no_op = (
            len(jobs) == 1
            and job.deployment is None
            and scale.shard is None
            and scale.cache_dir is None
            and scale.remote is None
            and build.output_error is None
            and not build.warnings
            and summary.get("compiled") == 0
            and summary.get("finalized") == 0
            and not summary.get("redone_cells")
            and not summary.get("warnings")
            and not _sweep.reported["compiled"]
            and not _sweep.reported["redone"]
            and os.path.realpath(build_dir) == os.path.realpath(self.build_dir)
        )
        if no_op:
            self.build_dir = build_dir
            self.cells = list(build.cells)
            self.kept = list(build.kept)
            self.digest = outputs_digest(build_dir)

    def close(self) -> None:
        global _OPENED
        if not self.closed:
            sys.stdout, sys.stderr = self.saved
            _OPENED = None
            self.closed = True

    def finish(self, code: int | None) -> bool:
        """After the run: write the stamp when it was a no-op whose inputs all predate it. Whether it wrote."""
        self.close()
        if code is None or self.digest is None:
            return False
        try:
            return self._write(code)
        except (OSError, ValueError, RuntimeError):
            return False

    def _write(self, code: int) -> bool:
        chunks = self._chunks()
        if chunks is None:
            return False
        inputs = self._inputs()
        if inputs is None:
            return False
        import json

        folder = self.build_dir / STAMP_DIR
        folder.mkdir(exist_ok=True)
        ids = "".join(f"{c.id}\n" for c in self.cells)
        stamp = {
            "v": VERSION,
            "key": self.key,
            "root": str(self.root),
            "build_dir": str(self.build_dir),
            "cells": len(self.cells),
            "inputs": inputs,
            "outputs": self.digest,
            "replay": {"variant": self.variant, "chunks": chunks, "code": code},
        }
        _replace(folder / f"{self.key}.ids", ids.encode("utf-8"))
        _replace(folder / f"{self.key}.json", json.dumps(stamp).encode("utf-8"))
        _prune(folder)
        return True

    def _chunks(self) -> list[list[Any]] | None:
        """What the run printed, its counts line's time replaced by TOOK; None when it cannot be replayed."""
        text = "".join(t for _, t in self.chunks)
        if "\r" in text or "\x1b" in text or "\x00" in text:
            return None  # a live display: not something to replay
        for chunk in reversed(self.chunks):
            if chunk[0] == 1:
                found = list(_COUNTS.finditer(chunk[1]))
                if found:
                    m = found[-1]
                    chunk[1] = chunk[1][: m.start()] + TOOK + chunk[1][m.end(1) + 3 :]
                    return self.chunks
        return None

    def _inputs(self) -> list[list[Any]] | None:
        """[path, fingerprint, content digest or None] for every input; None when one changed too
        recently to trust its fingerprint (or changed during the run)."""
        from ..config import find_project, split_project_arg

        project = find_project(split_project_arg(self.args)[0])
        if str(project.root) != str(self.root):
            return None  # this module's reading of the arguments disagrees with the build's: no stamp
        digested: dict[str, bool] = {}
        package = str(Path(__file__).resolve().parents[1])
        for top in (*project.conf_dirs, *project.recipe_dirs, package):
            _tree(str(top), digested, True)
        if project.marker is not None:
            digested[str(project.marker)] = True
        for cell in self.cells + self.kept:
            weights = cell.recipe.weights_path
            if weights is not None:
                _tree(str(weights), digested, False)
        stdlib = os.path.dirname(os.__file__) + os.sep
        build = os.path.realpath(self.build_dir) + os.sep
        for folder in sys.path:
            if folder and os.path.isdir(folder):
                digested.setdefault(os.path.abspath(folder), True)
        files = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
        for path in [f for f in files if isinstance(f, str)] + sorted(self.opened):
            real = os.path.realpath(path)
            if real.startswith((stdlib, build, "/proc/", "/dev/", "/sys/")) or real.endswith(".pyc"):
                continue
            digested.setdefault(path, False)
        out: list[list[Any]] = []
        oldest_allowed = self.started_ns - RACY_NS
        for path, with_digest in sorted(digested.items()):
            stamp = fingerprint(path)
            if stamp is not None and max(stamp[2], stamp[3]) >= oldest_allowed:
                return None  # racy: changed within the file system's clock resolution of this run
            digest = content_digest(path) if with_digest and stamp is not None else None
            if fingerprint(path) != stamp:
                return None
            out.append([path, stamp, digest])
        return out


def _tree(top: str, into: dict[str, bool], with_digest: bool) -> None:
    """A folder, its subfolders and files (no __pycache__), with or without content digests."""
    into.setdefault(top, with_digest)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in dirnames + filenames:
            into.setdefault(os.path.join(dirpath, name), with_digest)


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _prune(folder: Path) -> None:
    """Keep the KEEP_STAMPS most recent stamps (and their id lists); remove our own stale temporaries."""
    stamps = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in stamps[KEEP_STAMPS:]:
        old.unlink(missing_ok=True)
        old.with_suffix(".ids").unlink(missing_ok=True)
