"""Bench: one export per compile key + one finalize per budget, against one compile per cell.

    python bench/compile.py [--recipe tiny_llama] [--npu atom_max] [--verify]

The matrix is 1 model x 1 device x 5 budgets. The five budgets are picked with the memory model
and the estimator (rbln_build.memory, rbln_build.estimator): the exact smallest budgets at which
5, 6, 7 and 8 blocks fit, plus 100% of the device. Both approaches resolve every cell with the
estimator and write the same five cell artifacts with the ``torch`` backend:

* ours: compile once (one torch.export), then five finalizes (a hard link + rbln-build.json);
* per-cell (what building each budget with optimum-rbln means): five compiles, one per cell.

A warm-up compile runs first (untimed) so neither side pays the first-import cost.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rbln_build import memory  # noqa: E402
from rbln_build.backends import CompileSpec, get_backend  # noqa: E402
from rbln_build.backends.torch import _paged as paged  # noqa: E402
from rbln_build.estimator import Request, estimate, min_budget_for_blocks  # noqa: E402
from rbln_build.estimator._npu import resolve_npu  # noqa: E402
from rbln_build.memory._recipes import load_recipe  # noqa: E402


def _spec(recipe_name: str, npu_name: str) -> CompileSpec:
    recipe = load_recipe(recipe_name)
    npu = resolve_npu(npu_name)
    return CompileSpec.for_recipe(recipe, npu)


def _resolve(spec: CompileSpec, report, budget) -> int:
    request = Request.for_attention(
        spec.npu.name, spec.num_devices, spec.attention, memory_budget=budget, current_blocks=report.current_blocks
    )
    return int(estimate(request, report).raise_for_error().kvcache_num_blocks)


def pick_budgets(spec: CompileSpec) -> list[object]:
    report = memory.build_report(spec)
    att = spec.attention
    counts = range(att.num_min_blocks, att.num_full_blocks + 1)
    budgets: list[object] = [min_budget_for_blocks(report, n, spec.npu.num_chiplets) for n in counts][:4]
    budgets.append(None)  # all available DRAM
    return budgets[:5]


def run_ours(spec: CompileSpec, budgets: list[object], root: Path) -> tuple[float, int, list[int]]:
    backend = get_backend("torch")
    before = paged.export_count()
    start = time.perf_counter()
    base = root / "baseline"
    base.mkdir(parents=True)
    result = backend.compile(spec, base)
    counts = []
    for i, budget in enumerate(budgets):
        n = _resolve(spec, result.report, budget)
        cell = root / f"cell{i}"
        cell.mkdir()
        backend.finalize(spec, base, n, cell)
        counts.append(n)
    return time.perf_counter() - start, paged.export_count() - before, counts


def run_per_cell(spec: CompileSpec, budgets: list[object], root: Path) -> tuple[float, int, list[int]]:
    backend = get_backend("torch")
    before = paged.export_count()
    start = time.perf_counter()
    counts = []
    for i, budget in enumerate(budgets):
        base = root / f"baseline{i}"
        base.mkdir(parents=True)
        result = backend.compile(spec, base)
        n = _resolve(spec, result.report, budget)
        cell = root / f"cell{i}"
        cell.mkdir()
        backend.finalize(spec, base, n, cell)
        counts.append(n)
    return time.perf_counter() - start, paged.export_count() - before, counts


def _time_exports() -> list[float]:
    """Wrap the torch backend's export step with a timer (the bench's own instrument: production code
    keeps no timing state). Returns the list the export times of this process are appended to."""
    times: list[float] = []
    real = paged.export_paged

    def timed(*args: object, **kwargs: object) -> object:
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            times.append(time.perf_counter() - started)

    paged.export_paged = timed  # type: ignore[assignment]
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="tiny_llama")
    p.add_argument("--npu", default="atom_max")
    p.add_argument("--verify", action="store_true", help="also run 4 tokens on every cell of both approaches")
    args = p.parse_args(argv)
    exports = _time_exports()

    spec = _spec(args.recipe, args.npu)
    budgets = pick_budgets(spec)
    root = Path(tempfile.mkdtemp(prefix="rbln-build-bench-"))
    try:
        warm = root / "warmup"
        warm.mkdir()
        get_backend("torch").compile(spec, warm)  # untimed: first imports and first export
        ours_s, ours_exports, ours_counts = run_ours(spec, budgets, root / "ours")
        per_s, per_exports, per_counts = run_per_cell(spec, budgets, root / "per_cell")
        assert ours_counts == per_counts, (ours_counts, per_counts)
        for i in range(len(budgets)):  # both ways produce byte-identical cells
            for f in ("program.pt2", "rbln-build.json", "config.json"):
                a = (root / "ours" / f"cell{i}" / f).read_bytes()
                assert a == (root / "per_cell" / f"cell{i}" / f).read_bytes(), f
        if args.verify:
            from rbln_build.backends.torch._runtime import load_artifact

            for i in range(len(budgets)):
                load_artifact(root / "ours" / f"cell{i}").generate([[1, 2, 3], [4, 5]], 4)
        print(
            f"matrix: {args.recipe} x {spec.npu.name} x {len(budgets)} budgets "
            f"(picked with the memory model + estimator)"
        )
        print("budgets (bytes per device; None = 100%):", json.dumps(budgets))
        print("kvcache_num_blocks per cell:", ours_counts)
        print(
            f"torch.export time per compile: median {sorted(exports)[len(exports) // 2]:.2f} s "
            f"(min {min(exports):.2f}, max {max(exports):.2f}, n={len(exports)})"
        )
        print()
        print("| approach                        | exports | wall time (s) |")
        print("|---------------------------------|--------:|--------------:|")
        print(f"| one compile + {len(budgets)} finalizes (ours) | {ours_exports:7d} | {ours_s:13.2f} |")
        print(f"| one compile per cell            | {per_exports:7d} | {per_s:13.2f} |")
        print(
            f"\nspeed-up: {per_s / ours_s:.2f}x less wall time, {per_exports // max(ours_exports, 1)}x fewer exports; "
            "cells are byte-identical either way."
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
