"""The no-op short cut: a build (or ``status``) whose inputs and outputs are exactly as a no-op left
them answers without starting Hydra, expanding the matrix or running doit.

A full build that changed nothing (no compile, no cell redone or finalized, no warning, its outputs
written) records a stamp, ``<build_dir>/.noop/<key>.json`` (``_record``):

* ``key``: a digest of the invocation: the arguments, the working folder, the environment (minus
  a few shell variables that name nothing a build reads), the interpreter and ``sys.path``;
* ``inputs``: every file and folder the run's result can depend on, each with its ``os.stat``
  fingerprint (mode, size, mtime, ctime, inode): the project's and the shipped ``conf/`` and
  ``recipes/`` trees (backed by content digests: a file touched or checked out again with the
  same bytes still matches), the rbln_build package, every other module the run imported, each
  ``sys.path`` folder's listing (an installed or upgraded package changes it; one that is not there
  is stamped absent, as is every name the run looked for and did not find, wherever it lies), each local
  checkpoint's files, and every other file the run opened for reading (an audit hook);
* ``outputs``: one digest over the fingerprints of the build directory itself (its listing: a killed
  run's leftovers, ``.publishing``), the manifest, ``summary.json``, ``results.txt``, doit's state
  file, the ``artifacts/`` folder (a link added, removed or replaced changes it) and every file and
  folder of the cache (a record or entry deleted, rewritten or damaged changes it);
* what the run printed, in order, stdout and stderr, and its exit status.

A later run with the same key checks, under the build lock, that every input still matches (its
fingerprint, else its content digest) and that the outputs' digest is unchanged, then prints what the
no-op printed (with its own time) and exits as it did: what a full run would have done, since that
run's result is a function of exactly these inputs and the Store's files. Anything else (a changed
or unreadable stamp, a different key, one input or output that does not match, the lock held) is
the full path, which decides what is up to date with doit as always, and records a new stamp if it
turns out to be a no-op. An input modified within ``RACY_NS`` of a run's start is never stamped
(its fingerprint could miss a same-size rewrite within the file system's clock tick).

``status`` uses the same stamp read-only (no lock): when it matches, every cell is up to date.

This module imports nothing heavy: the short cut costs a stat per input and per cache file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from .._documents import read_file

__all__ = [
    "STAMP_DIR",
    "RACY_NS",
    "invocation_key",
    "locate",
    "fingerprint",
    "content_digest",
    "outputs_digest",
    "replay_build",
    "status_ids",
    "report_dir",
    "replay_report",
]

STAMP_DIR = ".noop"  # <build_dir>/.noop/<key>.json
VERSION = 1
RACY_NS = 2_000_000_000  # an input changed this close to a run's start is not stamped
TOOK = "\x00took\x00"  # where the replayed counts line puts its own time
MARKER = "rbln-build.yaml"  # config._project.MARKER (not imported: that package is heavy)
PROJECT_ENV = "RBLN_BUILD_PROJECT"
# shell bookkeeping that no build reads (everything else in the environment is part of the key)
_VOLATILE_ENV = frozenset({"_", "OLDPWD", "PWD", "SHLVL"})
# the build directory's own files a no-op's answer depends on (the lock file is rewritten by every taker)
_TOP = ("manifest.json", "summary.json", "results.txt", ".doit.sqlite3", "artifacts")
_STORE = "cache"  # <build_dir>/cache (a shared cache.dir is never short-cut)


def invocation_key(args: list[str]) -> str:
    """What identifies an invocation: its arguments (without the output-only flags), the working
    folder, the environment, the interpreter and its module path."""
    env = sorted((k, v) for k, v in os.environ.items() if k not in _VOLATILE_ENV)
    payload = {
        "v": VERSION,
        "args": args,
        "cwd": os.getcwd(),
        "env": env,
        "python": [sys.executable, sys.version],
        "path": sys.path,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8", "surrogateescape")).hexdigest()


def _eligible(args: list[str]) -> bool:
    """Only a plain run: overrides and ``--project``; no multirun, no Hydra flag or hydra.* key."""
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--project":
            skip = True
            continue
        if a.startswith("--project="):
            continue
        if a.startswith("-") or "hydra" in a.split("=", 1)[0] or "${" in a:
            return False
    return True


def locate(args: list[str]) -> tuple[Path, Path] | None:
    """(project root, build dir) as a run of ``args`` finds them when its build_dir is given as an
    override or left at the shipped default (``build``); None when the arguments are not eligible."""
    if not _eligible(args):
        return None
    chosen = None
    build: str | None = None
    for i, a in enumerate(args):
        if a == "--project" and i + 1 < len(args):
            chosen = args[i + 1]
        elif a.startswith("--project="):
            chosen = a.split("=", 1)[1]
        elif a.startswith("build_dir="):
            build = a.split("=", 1)[1]
    try:
        cwd = Path.cwd().resolve()
        chosen = chosen if chosen is not None else os.environ.get(PROJECT_ENV) or None
        if chosen is not None:
            root = Path(chosen)
            root = (root if root.is_absolute() else cwd / root).resolve()
        else:
            root = next((d for d in (cwd, *cwd.parents) if (d / MARKER).is_file()), cwd)
    except (OSError, RuntimeError, ValueError):  # ValueError: a NUL in a name
        return None
    if build is not None and (not build or build[0] in "'\"[{"):
        return None  # quoted or structured: Hydra's grammar, not a plain path
    value = Path(build if build is not None else "build")
    return root, value if value.is_absolute() else root / value


def fingerprint(path: str) -> list[int] | None:
    """os.stat (following links) as [mode, size, mtime_ns, ctime_ns, inode], or None when absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def content_digest(path: str) -> str | None:
    """A file's sha256, or a folder's listing's (names only), or None when unreadable."""
    try:
        if os.path.isdir(path):
            names = "\0".join(sorted(os.listdir(path)))
            return hashlib.sha256(names.encode("utf-8", "surrogateescape")).hexdigest()
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _walk(root: str, out: list[str]) -> None:
    try:
        with os.scandir(root) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        out.append(f"{root}\0unreadable")
        return
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            out.append(f"{e.path}\0gone")
            continue
        out.append(f"{e.path}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}")
        if e.is_dir(follow_symlinks=False):
            _walk(e.path, out)


def outputs_digest(build_dir: Path, also: tuple[str, ...] = ()) -> str:
    """One digest over the fingerprints (not following links) of the build directory's files that a
    no-op's answer depends on and of every file and folder under its cache (see the docstring), and
    under each folder of ``also`` (``report``: the report's own files)."""
    out: list[str] = []
    for name in (".", *_TOP, _STORE, *also):  # ".": the listing (a killed run's leftovers, .publishing)
        path = os.path.join(build_dir, name)
        try:
            st = os.lstat(path)
            out.append(f"{name}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}")
        except OSError:
            out.append(f"{name}\0absent")
    for name in (_STORE, *also):
        _walk(os.path.join(build_dir, name), out)
    return hashlib.sha256("\n".join(out).encode("utf-8", "surrogateescape")).hexdigest()


def inputs_match(inputs: list[list[Any]]) -> bool:
    """Every recorded input as it was: the same fingerprint, or else the same content digest."""
    for path, stamp, digest in inputs:
        now = fingerprint(path)
        if now == stamp:
            continue
        if now is None or digest is None or stamp is None or (now[0] ^ stamp[0]) & 0o170000:
            return False  # gone, appeared, no digest to fall back on, or a file became a folder
        if content_digest(path) != digest:
            return False
    return True


def _load(args: list[str]) -> tuple[dict[str, Any], Path] | None:
    """The stamp of this build invocation, if there is one and it is for this build directory."""
    where = locate(args)
    if where is None:
        return None
    root, build_dir = where
    return _read(build_dir, invocation_key(args), invocation_key(args), str(root))


def _read(build_dir: Path, name: str, key: str, root: str | None) -> tuple[dict[str, Any], Path] | None:
    path = build_dir / STAMP_DIR / f"{name}.json"
    try:
        if os.path.islink(path.parent) or os.path.islink(path):
            return None  # a stamp is only ever our own file in the build dir
        stamp = json.loads(read_file(path))  # a FIFO or a device is no stamp: never waited on or read
        if stamp.get("v") != VERSION or stamp.get("key") != key or stamp.get("root") != root:
            return None
        if os.path.realpath(stamp["build_dir"]) != os.path.realpath(build_dir):
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return stamp, build_dir


def _current(stamp: dict[str, Any], build_dir: Path, also: tuple[str, ...] = ()) -> bool:
    try:
        return inputs_match(stamp["inputs"]) and outputs_digest(build_dir, also) == stamp["outputs"]
    except (KeyError, TypeError, ValueError):
        return False


def variant(full_table: bool) -> list[bool]:
    """What else a build's printed output depends on: --full-table and whether it goes to terminals."""
    return [full_table, _isatty(sys.stdout), _isatty(sys.stderr)]


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def replay_build(args: list[str], full_table: bool) -> int | None:
    """The no-op's answer when the stamp of ``args`` holds (printed here; its exit status returned),
    else None: the caller runs the full build."""
    started = time.perf_counter()
    found = _load(args)
    if found is None:
        return None
    stamp, build_dir = found
    replay = stamp.get("replay")
    if not isinstance(replay, dict) or replay.get("variant") != variant(full_table):
        return None
    from filelock import FileLock, Timeout

    lock = FileLock(str(build_dir / ".lock"))  # store._lock.LOCK_FILE: another run may be writing
    try:
        lock.acquire(timeout=0)
    except (Timeout, OSError):
        return None  # the full path waits for it, and says so
    try:
        if not _current(stamp, build_dir):
            return None
    finally:
        lock.release()
    return _replay(replay, f"({time.perf_counter() - started:.1f}s).")


def _replay(replay: dict[str, Any], took: str = "") -> int:
    for stream, text in replay["chunks"]:
        (sys.stdout if stream == 1 else sys.stderr).write(text.replace(TOOK, took))
    return int(replay["code"])


REPORT_DIR = "report"  # reporting._cli.REPORT_DIR: the report's page and figure cache


def report_dir(args: list[str]) -> Path | None:
    """The build dir of ``rbln-build report ARGS`` when the short cut may answer it: no flag (no
    --open, no --compare), at most a build dir (``build_dir=PATH`` or ``PATH``)."""
    if len(args) > 1 or any(a.startswith("-") for a in args):
        return None
    value = args[0].split("=", 1)[1] if args and args[0].startswith("build_dir=") else (args[0] if args else "build")
    return Path(value) if value and "=" not in value else None


def replay_report(args: list[str]) -> int | None:
    """``report`` when its stamp holds: nothing it reads or wrote changed since a report wrote the
    page, which it would write again byte for byte; the answer is printed and its status returned.
    None: the caller writes the report."""
    build_dir = report_dir(args)
    if build_dir is None:
        return None
    key = invocation_key(["report", *args])
    found = _read(build_dir, f"report-{key}", key, None)
    if found is None:
        return None
    stamp, build_dir = found
    replay = stamp.get("replay")
    if not isinstance(replay, dict) or replay.get("variant") != variant(False):
        return None
    if not _current(stamp, build_dir, (REPORT_DIR,)):
        return None
    return _replay(replay)


def status_ids(args: list[str]) -> tuple[list[str], str] | None:
    """For ``status``: when the build's stamp of the same arguments holds (every cell up to date,
    nothing removed), the cell ids in the matrix's order and the build dir as the build printed it;
    else None. Read-only: no lock, nothing written."""
    found = _load(args)
    if found is None:
        return None
    stamp, build_dir = found
    try:
        ids = read_file(build_dir / STAMP_DIR / f"{stamp['key']}.ids").decode("utf-8").split("\n")[:-1]
    except (OSError, KeyError, UnicodeDecodeError):
        return None
    if len(ids) != stamp.get("cells") or not _current(stamp, build_dir):
        return None
    return ids, str(stamp["build_dir"])
