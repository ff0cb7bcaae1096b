"""How the CLI reports what goes wrong: one line per error, never a traceback, nothing written early.

* ``one_line``: Hydra's and OmegaConf's multi-line error reports condensed to one line (the key
  path they name is kept; the hints about HYDRA_FULL_ERROR and the grammar page are dropped).
* ``report_internal``: an unexpected exception's traceback goes to a log file; the user gets one
  line naming the error and that file.
* ``DeferredSweep``: Hydra's basic sweeper saves ``multirun.yaml`` before any job composes, so a
  sweep with a configuration error would still write ``<build_dir>/hydra/multirun.yaml``. The
  sweep is pointed at a private temporary folder instead, and its ``multirun.yaml`` is moved to the
  configured place (with the configured ``hydra.sweep.dir`` put back) only once every job composed
  and the build starts.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import traceback
from pathlib import Path

from ..config import closest_names

__all__ = ["one_line", "usage_error", "report_internal", "DeferredSweep", "LOG_DIR"]

LOG_DIR = "logs"  # <build_dir>/logs, as the stages use for their tracebacks
_NOISE = (
    "Set the environment variable HYDRA_FULL_ERROR",
    "See https://hydra.cc",
    "Error executing job",
    "object_type=",
    "reference_type=",
    "Traceback (most recent call last)",
)


def one_line(text: str) -> str:
    """The meaningful lines of an error report, joined into one (a traceback's frames are dropped:
    only its exception line is kept)."""
    kept: list[str] = []
    in_traceback = False
    for raw in text.splitlines():
        if raw.startswith("Traceback (most recent call last)"):
            in_traceback = True
            continue
        if in_traceback and (raw.startswith((" ", "\t")) or not raw.strip()):
            continue  # a frame, its source line or its carets
        in_traceback = False
        line = raw.strip()
        if line and not line.startswith(_NOISE):
            kept.append(line)
    message = " ".join(kept) or "invalid configuration"
    closest = closest_names(message)
    if closest is not None:
        return closest
    if "Traceback (most recent call last)" in text:
        message += " (Hydra could not compose the configuration with these overrides; check that each key exists)"
    return message


KEPT_ERRORS = 20  # traceback files kept in the temporary folder (no build dir): the newest, per user


def _temp_error_file(text: str) -> Path | None:
    """Write ``text`` to ``<tmp>/rbln-build-errors-<uid>/internal-error-<ns>-<pid>.txt`` and keep only the
    newest ``KEPT_ERRORS`` such files there (a fuzz run once left 271 loose files in the temp dir). The
    folder is this user's alone (0700, not a link, owned by us); otherwise no file is written."""
    import stat
    import time

    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(tempfile.gettempdir()) / f"rbln-build-errors-{uid}"
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != uid):
        return None
    where = folder / f"internal-error-{time.time_ns():020d}-{os.getpid()}.txt"  # names sort by time
    fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    kept = sorted(folder.glob("internal-error-*.txt"))
    for old in kept[:-KEPT_ERRORS]:
        old.unlink(missing_ok=True)
    return where


def report_internal(exc: BaseException, build_dir: Path | None) -> str:
    """Write ``exc``'s traceback to ``<build_dir>/logs/`` (or, when there is no build directory yet,
    to this user's folder in the temporary folder, which keeps the newest ``KEPT_ERRORS``) and
    return the one line to print."""
    text = "".join(traceback.format_exception(exc))
    where: Path | None = None
    try:
        if build_dir is not None and build_dir.is_dir():
            where = build_dir / LOG_DIR / f"internal-error-{os.getpid()}.txt"
            where.parent.mkdir(exist_ok=True)
            where.write_text(text, encoding="utf-8")
        else:
            where = _temp_error_file(text)
    except OSError:
        where = None
    detail = f"; the traceback is in {where}" if where is not None else ""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return (
        f"rbln-build: internal error: {type(exc).__name__}: {first}{detail}. "
        "This is a bug in rbln-build; please report it with that file."
    )


class DeferredSweep:
    """A multirun's ``multirun.yaml`` kept in a private folder until the build may write."""

    OVERRIDE = "hydra.sweep.dir"

    def __init__(self, argv: list[str]) -> None:
        self.tmp: Path | None = None
        multirun = any(a in ("-m", "--multirun") for a in argv)
        chosen = any(a.lstrip("+~").startswith(self.OVERRIDE + "=") for a in argv)
        if multirun and not chosen:  # a sweep dir the user chose is theirs: Hydra writes it as it does
            self.tmp = Path(tempfile.mkdtemp(prefix="rbln-build-sweep-"))
            self.override = f"{self.OVERRIDE}={self.tmp}"
            argv.append(self.override)

    def publish(self, build_dir: Path) -> None:
        """Move the saved ``multirun.yaml`` to ``<build_dir>/hydra/`` (the configured sweep dir,
        ``${build_dir}/hydra``), as Hydra would have written it."""
        if self.tmp is None:
            return
        saved = self.tmp / "multirun.yaml"
        if saved.is_file():
            from omegaconf import OmegaConf

            cfg = OmegaConf.load(saved)
            cfg.hydra.sweep.dir = "${build_dir}/hydra"
            cfg.hydra.overrides.hydra = [o for o in cfg.hydra.overrides.hydra if o != self.override]
            dest = build_dir / "hydra"
            dest.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(cfg, dest / "multirun.yaml")

    def close(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def usage_error(text: str) -> str | None:
    """Hydra's argparse refusal (its whole usage, then ``rbln-build: error: ...``) as what was
    refused and where the options are listed; None for any other report."""
    found = re.search(r"^[^\n]*?: error: (.+)$", text, re.MULTILINE)
    if not text.startswith("usage:") or found is None:
        return None
    return f"{found[1].strip()}; overrides are KEY=VALUE, and rbln-build --help lists the options."
