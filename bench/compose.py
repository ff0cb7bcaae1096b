"""A plain run's Hydra composition: once (rbln_build.commands._compose_once) against Hydra's twice.

    python bench/compose.py [--root build/compose-bench] [--repeat 7]

Composes the 10,008-cell sweep matrix of bench/sweep.py (``matrix=sweep_k10``: 556 budgets) and the
default matrix in this process, alternating the two ways in each repeat: with the short cut, and
with ``composed_once`` replaced by a no-op context (``@hydra.main`` as Hydra runs it: ``get_mode``
composes in MULTIRUN mode to read ``hydra.mode``, then the run composes again). Each repeat checks
that both ways gave the same jobs and counts the compositions. Prints the minimum of each and the
ratio once/twice. Nothing is built (the jobs are composed and converted to BuildSettings only).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def compose(project: Any, args: list[str], once: bool) -> tuple[float, str, int]:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from rbln_build.commands import _build, _compose_once

    real_once, real_load = _compose_once.composed_once, ConfigLoaderImpl._load_configuration_impl
    count = [0]

    def counting(self: Any, *a: Any, **k: Any) -> Any:
        count[0] += 1
        return real_load(self, *a, **k)

    ConfigLoaderImpl._load_configuration_impl = counting  # type: ignore[method-assign]
    if not once:
        _compose_once.composed_once = lambda args: contextlib.nullcontext()  # type: ignore[assignment]
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            started = time.perf_counter()
            jobs, errors, _ = _build._compose_jobs(project, list(args))
            took = time.perf_counter() - started
    finally:
        _compose_once.composed_once = real_once  # type: ignore[assignment]
        ConfigLoaderImpl._load_configuration_impl = real_load  # type: ignore[method-assign]
    if errors:
        sys.exit(f"{args}: {errors[0]}")
    return took, repr(jobs), count[0]


def main() -> int:
    import sweep  # bench/sweep.py: the same project and matrices

    from rbln_build.config import find_project

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=REPO / "build" / "compose-bench")
    parser.add_argument("--repeat", type=int, default=7)
    opts = parser.parse_args()
    project = find_project(str(sweep.write_project(opts.root.resolve())))
    shipped = find_project(None)
    for label, where, args in (
        ("10,008-cell sweep (matrix=sweep_k10)", project, ["matrix=sweep_k10", "progress=false"]),
        ("default matrix", shipped, ["progress=false"]),
    ):
        times: dict[bool, list[float]] = {False: [], True: []}
        counts: dict[bool, int] = {}
        for _ in range(opts.repeat + 1):  # the first round warms the imports and Hydra's plugins: not kept
            seen = {}
            for once in (False, True):
                took, seen[once], counts[once] = compose(where, args, once)
                times[once].append(took)
            if seen[False] != seen[True]:
                sys.exit(f"{label}: composing once gave other jobs than composing twice")
        twice, once = min(times[False][1:]), min(times[True][1:])
        print(
            f"{label}: Hydra's way ({counts[False]} compositions) {twice:.3f} s, once ({counts[True]}) "
            f"{once:.3f} s: ratio {once / twice:.2f} (minimum of {opts.repeat})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
