"""The ``artifacts/<cell id>`` links of a build dir (``_publish``: when they are made, and why).

A link is only ever a symlink that rbln-build made, pointing into ``cache/artifacts``
(``../cache/artifacts/<key>/files``): a real file or folder that a user put in ``artifacts/`` is an
error that names it, never removed, and so is a link someone else made.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BuildError
from ..estimator import cell_id_problem
from ..store import CellResult, is_key, write_atomic

if TYPE_CHECKING:
    from ..config import Cell

__all__ = ["ARTIFACTS_DIR", "PUBLISHING_FILE", "EarlyLinks", "Marker", "inside", "link_rows", "ours", "link_atomic"]

ARTIFACTS_DIR = "artifacts"
PUBLISHING_FILE = ".publishing"  # present from the first change to a link or the manifest until all agree


def inside(root: Path, path: Path) -> Path:
    """``path`` resolved, if it lies inside ``root`` (resolved); else a BuildError naming both."""
    real_root = root.resolve()
    real = path.resolve()
    if real != real_root and real_root not in real.parents:
        raise BuildError(f"{path} resolves to {real}, outside {real_root}; refusing to write there.")
    return real


def link_rows(
    build_dir: Path,
    rows: list[tuple[Cell, CellResult | None]],
    entries: list[dict[str, Any]],
    warn: Callable[[str], None],
    changing: Callable[[], None],
    made: dict[str, CellResult] | None = None,
) -> dict[str, str]:
    """Point each row's link at its artifact (``_link``); returns cell id -> why its link could not
    be made or removed. ``warn`` and ``changing``: as ``_link``'s. ``made``: cell id -> the result
    whose link is made already (``EarlyLinks``): those rows are left as they are."""
    made = made or {}
    links, outside, present = _listing(build_dir)
    folder = os.fspath(links)
    problems: dict[str, str] = {}  # cell id -> why its link could not be made or removed
    for (cell, result), entry in zip(rows, entries, strict=True):
        if result is not None and made.get(cell.id) is result and entry["artifact"] is not None:
            continue
        try:
            _link(
                folder,
                links,
                cell.id,
                None if entry["artifact"] is None or result is None else result,
                outside,
                warn,
                changing,
                present is None or cell.id in present,
            )
        except (OSError, BuildError) as exc:
            problems[cell.id] = str(exc)
    return problems


def _listing(build_dir: Path) -> tuple[Path, str | None, set[str] | None]:
    """``artifacts/``, why it may not be written (it resolves outside the build dir: None when it
    may), and the names in it: listed once instead of a readlink per cell for the names not there (a
    fresh build: all). None: not listable, each name is read as it comes."""
    links = build_dir / ARTIFACTS_DIR
    try:
        inside(build_dir, links)  # artifacts/ may not be a link to somewhere else
    except BuildError as exc:
        return links, str(exc), None
    try:
        return links, None, set(os.listdir(links))
    except FileNotFoundError:
        return links, None, set()
    except OSError:
        return links, None, None


def _link(
    folder: str,
    links: Path,
    cell_id: str,
    result: CellResult | None,
    outside: str | None,
    warn: Callable[[str], None],
    changing: Callable[[], None],
    listed: bool = True,
) -> None:
    """Point ``artifacts/<cell_id>`` at the result's artifact (None: remove our link there), with
    one readlink when it is right already. A user's file, folder or link there is an error naming it;
    ``warn`` hears of a link of ours that pointed elsewhere; ``changing`` is called before the link
    is made, replaced or removed. ``listed``: False when a listing of the folder just now did not
    have the name (no readlink; a name that appeared since makes the symlink fail, and the general
    way below checks it)."""
    if outside is not None:
        raise BuildError(outside)
    problem = cell_id_problem(cell_id)  # checked at expansion; a name here is never a path elsewhere
    if problem is not None:
        raise BuildError(f"{links}: {problem}")
    link = os.path.join(folder, cell_id)
    try:
        current: str | None = os.readlink(link) if listed else None
    except FileNotFoundError:
        current = None
    except OSError:  # not a symlink: a user's file or folder
        raise BuildError(
            f"{link} is not a link rbln-build made; move it out of {links} (rbln-build never deletes it)."
        ) from None
    if result is None or result.artifact_key is None:
        if current is not None:
            if not _our_target(current):
                raise BuildError(
                    f"{link} is not a link rbln-build made; move it out of {links} (rbln-build never deletes it)."
                )
            changing()
            os.unlink(link)
        return
    target = f"../cache/artifacts/{result.artifact_key}/files"
    if current == target:
        return
    if current is not None and not _our_target(current):
        raise BuildError(
            f"{link} is a link rbln-build did not make; move it out of {links} (rbln-build never replaces it)."
        )
    if current is not None:
        warn(
            f"{link} pointed at {current}, not at the artifact manifest.json names for it "
            f"(changed since the last build); re-linked to {target}"
        )
    changing()
    if current is None:  # a new link: symlink(2) makes it whole or not at all, no temporary name needed
        try:
            os.symlink(target, link)
            return
        except FileExistsError:
            if not listed:  # there after all: read and checked as any name that is there
                return _link(folder, links, cell_id, result, outside, warn, changing)
        except FileNotFoundError:
            pass  # no artifacts/ yet: the general way below
    link_atomic(Path(link), target)


class EarlyLinks:
    """The links of the cells the workers build, made by a thread of their own while the workers
    build (the scheduler hands over each batch as it comes back, ``Parallel.recorded``): a fresh
    10,008-cell sweep makes 7,298 links, which took 0.2-0.5 s after the workers were done, on one
    core. The manifest on disk does not name them yet, so ``.publishing`` is written before the
    first (``marker``). ``publish`` then makes only the links not made here (``made``: cell id ->
    the result linked), and a link it could not make here is made there again, and its error
    reported there. ``repaired``: links of ours found pointing elsewhere (tampering, if the
    manifest turns out unchanged)."""

    def __init__(self, build_dir: Path) -> None:
        self.build_dir = build_dir
        self.marker = Marker(build_dir / PUBLISHING_FILE)
        self.made: dict[str, CellResult] = {}
        self.repaired: list[str] = []
        self._batches: queue.SimpleQueue[list[tuple[str, CellResult]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._cancel = False

    def add(self, cells: list[Cell], results: list[CellResult]) -> None:
        batch = [(c.id, r) for c, r in zip(cells, results, strict=True) if r.ok and r.artifact_key is not None]
        if not batch:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="rbln-build-early-links", daemon=True)
            self._thread.start()
        self._batches.put(batch)

    def _work(self) -> None:
        links, outside, present = _listing(self.build_dir)
        if outside is not None:
            return  # publish says so, for every cell
        folder = os.fspath(links)
        while (batch := self._batches.get()) is not None:
            for cell_id, result in [] if self._cancel else batch:
                listed = present is None or cell_id in present
                try:
                    _link(folder, links, cell_id, result, None, self.repaired.append, self.marker, listed)
                except (OSError, BuildError):
                    continue  # publish tries again, and reports why it cannot
                self.made[cell_id] = result

    def close(self, cancel: bool = False) -> None:
        """Wait for the links handed over (``cancel``: the ones not started yet are dropped)."""
        if self._thread is not None:
            self._cancel = cancel
            self._batches.put(None)
            self._thread.join()
            self._thread = None


class Marker:
    """Writes ``.publishing`` once, before the first change to a link or to the manifest (from
    either thread of ``publish``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.written = False

    def __call__(self) -> None:
        with self.lock:
            if not self.written:
                write_atomic(self.path, b"")
                self.written = True


def _our_target(target: str) -> bool:
    parts = target.split("/")
    return len(parts) == 5 and parts[:3] == ["..", "cache", "artifacts"] and is_key(parts[3]) and parts[4] == "files"


def ours(link: Path) -> bool:
    """``link`` is a symlink rbln-build made: its target is ``../cache/artifacts/<key>/files``."""
    if not link.is_symlink():
        return False
    return _our_target(os.readlink(link))


def link_atomic(link: Path, target: str) -> None:
    """Make ``link`` a symlink to ``target`` (replacing an older symlink of ours atomically). A real
    file or folder there is never replaced: it is the user's."""
    if link.is_symlink():
        if os.readlink(link) == target:
            return
    elif link.exists():
        raise BuildError(
            f"{link} is not a link rbln-build made; move it out of {link.parent} (rbln-build never deletes it)."
        )
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.parent / f".tmp-{link.name}-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    finally:
        if tmp.is_symlink():
            tmp.unlink()
