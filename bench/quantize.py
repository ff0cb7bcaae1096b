"""Bench: what a quantized variant costs, as a ratio of the float build, measured side by side.

    python bench/quantize.py [--arch llama] [--variants w8,w4,wfp8] [--rounds 2]

A tiny checkpoint with a real tokenizer (tests/_checkpoints.py: the one the tests build) is added as a
recipe; then, in one process and alternating, the float compile (torch backend: one torch.export) and
for each variant: the quantization stage (``variants._stage``: round to nearest into the Store),
the compile of the quantized weights, and the quality measurement (``measure_variant``: perplexity and
greedy agreement of the variant's program and of the float weights, on CPU). Each figure is the best of
``--rounds``; every ratio divides by the float compile of the same run. A warm-up compile runs first.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from _checkpoints import make_checkpoint  # noqa: E402

from rbln_build.backends import CompileSpec, get_backend  # noqa: E402
from rbln_build.estimator._npu import resolve_npu  # noqa: E402
from rbln_build.memory._recipes import load_recipe  # noqa: E402
from rbln_build.quantization import parse_variant  # noqa: E402
from rbln_build.scaffold._recipe import add_recipe  # noqa: E402
from rbln_build.store import Store  # noqa: E402
from rbln_build.variants import measure_variant, quantized_spec  # noqa: E402


def _timed(fn, *args):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="llama", choices=["llama", "qwen3"])
    parser.add_argument("--variants", default="w8,w4,wfp8")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    backend = get_backend("torch")
    with tempfile.TemporaryDirectory(prefix="rbln-build-bench-q-") as tmp:
        root = Path(tmp)
        checkpoint = make_checkpoint(root / "ck", args.arch, seed=7)
        add_recipe("ck", checkpoint, root / "recipes", None, max_seq_len=256)
        recipe = load_recipe("ck", root=root / "recipes")
        float_spec = CompileSpec.for_recipe(recipe, resolve_npu("RBLN-CA25"))
        variants = [parse_variant(v, "--variants") for v in args.variants.split(",")]
        best: dict[str, float] = {}
        quality: dict[str, dict] = {}
        n = 0

        def out_dir() -> Path:
            nonlocal n
            n += 1
            d = root / f"out{n}"
            d.mkdir()
            return d

        backend.compile(float_spec, out_dir())  # warm-up: imports, first export
        for _ in range(args.rounds):
            t, _r = _timed(backend.compile, float_spec, out_dir())
            best["float compile"] = min(best.get("float compile", t), t)
            for q in variants:
                spec = replace(float_spec, recipe=replace(recipe, weight_bits=q.weight_bits), quantization=q)
                store = Store(root / f"store{n}")  # a fresh store: the stage runs (no cache hit)
                t_stage, (compiled, _record) = _timed(quantized_spec, store, spec)
                files = out_dir()
                t_compile, result = _timed(backend.compile, compiled, files)
                t_quality, figures = _timed(measure_variant, store, spec, compiled, files, result.produced)
                t_hit, _ = _timed(quantized_spec, store, spec)  # the stage again: a cache hit
                for what, t in (
                    ("stage", t_stage),
                    ("compile", t_compile),
                    ("quality", t_quality),
                    ("stage hit", t_hit),
                ):
                    key = f"{q.name} {what}"
                    best[key] = min(best.get(key, t), t)
                quality[q.name] = figures or {}
        base = best["float compile"]
        print(
            f"{args.arch} tiny checkpoint, torch backend, best of {args.rounds} rounds (seconds, ratio to the float compile)"
        )
        print(f"{'float compile':<18} {base:8.3f}s  1.00")
        for q in variants:
            for what in ("stage", "compile", "quality", "stage hit"):
                t = best[f"{q.name} {what}"]
                print(f"{q.name + ' ' + what:<18} {t:8.3f}s  {t / base:5.2f}")
            total = sum(best[f"{q.name} {w}"] for w in ("stage", "compile", "quality"))
            f = quality[q.name]
            print(
                f"{q.name + ' total':<18} {total:8.3f}s  {total / base:5.2f}   "
                f"ppl {f.get('perplexity_increase', 0):+.2%}, greedy agreement {f.get('greedy_agreement', 0):.0%}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
