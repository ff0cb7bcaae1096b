"""Verify the programs of a cache entry as data, whatever the entry is (a compile baseline or a cell).

    verify_entry_files(files_dir)   -> None, or IntegrityError naming the file and what is wrong

A content hash proves that an entry is intact, not that whoever wrote it (a shared cache, a remote)
is trustworthy: a consistent forged entry hashes fine. So an entry's programs are checked as data
too, when the entry comes from elsewhere (downloaded from ``cache.remote``, sent by a Ray worker)
and whenever a local entry is verified in full:

* every ``*.pt2`` file: the archive allowlist and the graph check (``torch._archive``,
  ``torch._graph``: nothing torch would unpickle, no string torch would evaluate);
* a cell's ``rbln-build.json``: every program it lists has the recorded sha256;
* a torch baseline's ``baseline.json``: the program has its recorded ``program_sha256``;
* an rbln baseline's ``baseline.json``: every ``*.rbln`` has the sha256 in ``programs``.

Needs no torch (zipfile, json, ast), so a no-op build stays free of it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import IntegrityError, RblnBuildError
from ._record import RECORD_FILE, read_record, verify_programs

__all__ = ["verify_entry_files"]

BASELINE_FILE = "baseline.json"
MAX_PROGRAM_BYTES = 64 << 30  # read whole for the archive check; far above any program we write


def _program_bytes(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_PROGRAM_BYTES:
            raise IntegrityError(f"{path}: {size:,} bytes, more than a program may hold; rebuild it.")
        return path.read_bytes()
    except OSError as exc:
        raise IntegrityError(f"{path}: cannot read the program ({exc.strerror}); rebuild it.") from None


def _check_baseline(files: Path) -> None:
    path = files / BASELINE_FILE
    try:
        baseline = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise IntegrityError(f"{path}: unreadable baseline ({type(exc).__name__}); rebuild the entry.") from None
    if not isinstance(baseline, dict):
        raise IntegrityError(f"{path}: not a baseline record; rebuild the entry.")
    digests: dict[str, object] = {}
    if baseline.get("produced") == "program":
        digests = {str(baseline.get("program", "program.pt2")): baseline.get("program_sha256")}
    elif isinstance(baseline.get("programs"), dict):
        digests = dict(baseline["programs"])
    for name, expected in sorted(digests.items()):
        if Path(name).name != name or name in ("", ".", ".."):
            raise IntegrityError(f"{path}: program name {name!r} is not a file of the entry; rebuild the entry.")
        actual = hashlib.sha256(_program_bytes(files / name)).hexdigest()
        if actual != expected:
            raise IntegrityError(
                f"{files / name}: sha256 {actual} does not match {expected} recorded in {BASELINE_FILE}; "
                "rebuild the entry."
            )


def verify_entry_files(files: Path) -> None:
    """Raise IntegrityError unless every program in ``files`` checks out as data (see above)."""
    from .torch._archive import check_program_archive

    files = Path(files)
    if (files / RECORD_FILE).is_file():
        try:
            verify_programs(files, read_record(files))
        except IntegrityError:
            raise
        except RblnBuildError as exc:  # an unreadable record
            raise IntegrityError(str(exc)) from None
    if (files / BASELINE_FILE).is_file():
        _check_baseline(files)
    for program in sorted(files.rglob("*.pt2")):
        if program.is_symlink():
            raise IntegrityError(f"{program}: a program may not be a symbolic link; rebuild the entry.")
        check_program_archive(_program_bytes(program), program)
