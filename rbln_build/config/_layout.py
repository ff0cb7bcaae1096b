"""What a build directory holds, and the rule that nothing in it is followed out.

rbln-build writes, rewrites and removes inside ``build_dir``: ``cache/`` and its kinds, ``artifacts/``,
``logs/``, ``hydra/``, doit's ``.doit.sqlite3``, ``.lock``, ``manifest.json``, ``summary.json``, ... A
symbolic link there that resolves outside ``build_dir`` would carry those writes and removals out
(a ``cache`` linked to a folder other builds use would lose their temporary folders at start-up and
their entries to ``gc``). So before a build or ``gc`` touches anything, ``check_contained`` refuses
any such name that resolves outside (a ``ConfigError``: exit 2, one line naming it and what to do).

The one supported way to share a cache between build dirs is the setting ``cache.dir=PATH``:
``link_shared_cache`` then makes ``build_dir/cache`` rbln-build's own link to ``PATH`` (and
``check_contained`` accepts exactly that link), the Store takes a per-key lock for every entry it
makes there, start-up clean-up removes only the temporary names this build dir made (``owner_tag``)
and ``gc`` leaves the shared entries alone. docs/scaling.md ("A cache shared by build dirs").
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..errors import ConfigError

__all__ = ["CACHE_DIR", "check_cache_dir", "check_contained", "link_shared_cache", "owner_tag"]

CACHE_DIR = "cache"
CACHE_KINDS = ("compile", "artifacts", "results", "failures", "inventory", "weights", "quantized", "quality", "locks")
# Everything else rbln-build writes directly in build_dir (files and folders; see docs/security.md).
# ``artifacts`` is checked where it is written (publish: an output error naming it; gc: on removal).
OWN_NAMES = (
    "logs",
    "hydra",
    ".doit.sqlite3",
    ".doit.sqlite3.corrupt",
    ".lock",
    ".publishing",
    "manifest.json",
    "summary.json",
    "progress-history.json",
)


def _inside(root: Path, real: Path) -> bool:
    return real == root or root in real.parents


def owner_tag(build_dir: Path) -> str:
    """The tag of ``build_dir``'s temporary names in a shared cache (its resolved path, hashed)."""
    return "o" + hashlib.sha256(str(Path(build_dir).resolve()).encode("utf-8")).hexdigest()[:12]


def check_cache_dir(value: object, cwd: Path, build_dir: Path) -> Path | None:
    """``cache.dir`` as an absolute path (relative to ``cwd``), or None for the build dir's own cache.
    Not a file, not in a pseudo file system, not inside the build dir (other than its ``cache``)."""
    from ._checks import PSEUDO_FILESYSTEMS

    if value is None:
        return None
    text = str(value)
    if not text.strip():
        raise ConfigError("cache.dir: is empty; give a folder shared by several build dirs, or leave it unset.")
    path = Path(text).expanduser()
    path = path if path.is_absolute() else cwd / path
    real = path.resolve()
    real_build = build_dir.resolve()
    if real == (real_build / CACHE_DIR) and not (build_dir / CACHE_DIR).is_symlink():
        return None  # the build dir's own cache: nothing shared
    if _inside(real_build, real) or _inside(real, real_build):
        raise ConfigError(
            f"cache.dir: {path} is inside the build dir {build_dir} or holds it; choose a folder of its own "
            "(e.g. ~/.cache/rbln-build/shared)."
        )
    if path.exists() and not path.is_dir():
        raise ConfigError(f"cache.dir: {path} is a file, not a folder; choose another cache.dir.")
    for pseudo in PSEUDO_FILESYSTEMS:
        if _inside(pseudo, real):
            raise ConfigError(f"cache.dir: {path} is in {pseudo}, a pseudo file system; choose another cache.dir.")
    return path


def check_contained(build_dir: Path, cache_dir: Path | None = None) -> None:
    """Raise ConfigError if a name rbln-build writes in ``build_dir`` resolves outside it (the cache:
    outside the cache, or, with ``cache_dir``, anywhere but ``cache_dir``). Creates nothing."""
    build_dir = Path(build_dir)
    if not build_dir.is_dir():
        return
    real = build_dir.resolve()
    for name in OWN_NAMES:
        path = build_dir / name
        if os.path.lexists(path) and not _inside(real, path.resolve()):
            raise ConfigError(
                f"{path} resolves to {path.resolve()}, outside the build dir {real}; rbln-build writes and removes "
                f"there, so it does not follow it out. Remove the link (rbln-build makes {name} itself)."
            )
    cache = build_dir / CACHE_DIR
    if cache_dir is None:
        if os.path.lexists(cache) and not _inside(real, cache.resolve()):
            raise ConfigError(
                f"{cache} resolves to {cache.resolve()}, outside the build dir {real}; a linked cache is not followed "
                f"(start-up clean-up and gc would remove there). Remove the link, and to share a cache set "
                f"cache.dir={cache.resolve()} (docs/scaling.md)."
            )
        cache_real = cache.resolve()
    else:
        cache_real = Path(cache_dir).resolve()
        if os.path.lexists(cache) and cache.resolve() != cache_real:
            what = f"links to {cache.resolve()}" if cache.is_symlink() else "is this build dir's own cache folder"
            raise ConfigError(
                f"{cache} {what}, but cache.dir={cache_dir} says the cache is shared there; move {cache} aside "
                "(rbln-build then links it to cache.dir), or drop cache.dir."
            )
    for kind in CACHE_KINDS:
        path = cache / kind
        if os.path.lexists(path) and not _inside(cache_real, path.resolve()):
            raise ConfigError(
                f"{path} resolves to {path.resolve()}, outside the cache {cache_real}; rbln-build writes and removes "
                f"there, so it does not follow it out. Remove the link (rbln-build makes {kind}/ itself)."
            )


def link_shared_cache(build_dir: Path, cache_dir: Path) -> None:
    """Make ``build_dir/cache`` rbln-build's link to the shared ``cache_dir`` (creating the folder).
    Call after ``check_contained``, holding the build lock."""
    cache = Path(build_dir) / CACHE_DIR
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(cache):
        os.symlink(Path(cache_dir).resolve(), cache)
