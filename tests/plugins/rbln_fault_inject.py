"""``python -m rbln_fault_inject ROOT KILL_AT COUNT_FILE [rbln-build args...]``: the real CLI in this
process, with every file-system mutation under ROOT counted, and the process SIGKILLed just before
mutation number KILL_AT (1-based; 0 never kills). At exit the number of mutations seen is written to
COUNT_FILE (a killed run writes nothing). With ``RBLN_FAULT_MAIN_ONLY=1``, only this process's
mutations count (and kill): a forked worker's are not seen, so a kill is always the build's.

Mutations: ``os.replace``, ``os.rename``, ``os.link``, ``os.symlink``, ``os.mkdir``, ``os.unlink``,
``os.rmdir``, ``os.open`` with a writing flag, and ``open`` for writing (``builtins.open``,
``io.open``, so ``Path.write_*`` too). sqlite's own writes (doit's state) happen in C and are not
seen; its transactions are atomic on their own.
"""

from __future__ import annotations

import atexit
import builtins
import io
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_seen = 0


def _install(root: Path, kill_at: int) -> None:
    real_root = str(root.resolve())

    def under(path: Any) -> bool:
        if isinstance(path, int):
            return False
        try:
            text = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return text == real_root or text.startswith(real_root + os.sep)

    main = os.getpid() if os.environ.get("RBLN_FAULT_MAIN_ONLY") == "1" else None

    def mutation(*paths: Any) -> None:
        global _seen
        if (main is None or os.getpid() == main) and any(under(p) for p in paths):
            _seen += 1
            if _seen == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    def wrap(name: str, path_args: tuple[int, ...]) -> None:
        real: Callable[..., Any] = getattr(os, name)

        def patched(*args: Any, **kwargs: Any) -> Any:
            mutation(*(args[i] for i in path_args if i < len(args)))
            return real(*args, **kwargs)

        setattr(os, name, patched)

    for name, idx in (
        ("replace", (0, 1)),
        ("rename", (0, 1)),
        ("link", (1,)),
        ("symlink", (1,)),
        ("mkdir", (0,)),
        ("unlink", (0,)),
        ("rmdir", (0,)),
        ("remove", (0,)),
    ):
        wrap(name, idx)

    real_os_open = os.open
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & writing:
            mutation(path)
        return real_os_open(path, flags, *args, **kwargs)

    os.open = os_open  # type: ignore[assignment]
    real_open = io.open

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+"):
            mutation(file)
        return real_open(file, mode, *args, **kwargs)

    builtins.open = open_  # type: ignore[assignment]
    io.open = open_  # type: ignore[assignment]


if __name__ == "__main__":
    root, kill_at, count_file = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    atexit.register(lambda: count_file.write_text(str(_seen)))  # registered first: runs last
    _install(root, kill_at)
    sys.argv = ["rbln-build", *sys.argv[4:]]
    from rbln_build.cli import main

    main()
