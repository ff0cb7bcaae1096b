"""Writing a new recipe's files: never over an existing one, and on failure only what this call made
is removed (``recipe add`` from a checkpoint and from a GGUF both write through here)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError, InputError

__all__ = ["check_new", "write_new"]


def write_new(files: list[tuple[Path, bytes]], directory: Path) -> list[Path]:
    """Write each file exclusively (never overwriting); on failure remove only what this call made."""
    written: list[Path] = []
    try:
        for path, data in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "xb") as f:  # exclusive: never overwrite
                written.append(path)
                f.write(data)
    except OSError as exc:  # a recipes folder that is a file, cannot be written, a loop
        for path in written:  # only what this call created
            path.unlink(missing_ok=True)
        raise InputError(
            f"{exc.filename or directory}: cannot write the recipe ({exc.strerror or exc}); "
            "give a writable recipes folder (--to) or fix the project's."
        ) from None
    return written


def check_new(targets: list[Path]) -> None:
    existing = [str(t) for t in targets if t.exists()]
    if existing:
        raise ConfigError(
            f"{', '.join(existing)} already exist(s); rbln-build never overwrites a recipe. Choose another NAME."
        )
