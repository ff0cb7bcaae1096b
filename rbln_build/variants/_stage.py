"""The stage that makes a variant's quantized checkpoint: cached, content-addressed, in the Store.

``quantized_spec(store, spec)`` is what a compile of a quantized variant made from float weights
compiles instead of ``spec``: the same spec whose recipe's weights are a checkpoint in optimum-rbln's
format, made once per (float weights, format, method) under ``cache/quantized/<key>/files`` (the
Store's entries: written to a temporary folder and renamed, verified on read). The key hashes the
recipe's content hash, the float weights' digest (or seed), the format and ``quantization.METHOD``, so every
device, budget and attention option of one variant shares one checkpoint, and a changed input makes a
new one. The entry's metadata is the record (method, format, layers, largest rounding error).

A spec whose recipe is already quantized (``Recipe.quantized``), or not quantized, is returned as is:
a float checkpoint never reaches a compiler as quantized, and a quantized one is never re-quantized.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..backends import Backend
    from ..memory import CompileSpec
    from ..store import Store

__all__ = ["quantized_spec", "measure_variant", "compile_record", "KIND"]

KIND = "quantized"


def stage_key(spec: CompileSpec) -> str:
    from ..quantization import METHOD
    from ..store import digest

    recipe = spec.recipe
    return digest(
        {
            "stage": "quantized-checkpoint/1",
            "recipe_hash": recipe.content_hash,
            "weights": recipe.weights_hash if recipe.weights_hash is not None else f"seed:{recipe.seed}",
            "format": spec.quantized.to_json(),
            "method": METHOD,
        }
    )


def needs_stage(spec: CompileSpec) -> bool:
    recipe = spec.recipe
    return recipe.has_weights and recipe.quantized is None and not spec.quantized.is_none


def quantized_spec(store: Store, spec: CompileSpec) -> tuple[CompileSpec, dict[str, Any] | None]:
    """(the spec to compile, the stage's record or None when nothing was quantized)."""
    if not needs_stage(spec):
        return spec, None
    from ..memory import inspect_checkpoint
    from ._write import write_quantized

    key = stage_key(spec)
    entry = store.lookup(KIND, key)
    if entry is None:

        def fill(files: Path) -> dict[str, Any]:
            recipe = spec.recipe
            if recipe.weights_path is not None:
                return write_quantized(recipe.weights_path, files, spec.quantized)
            from safetensors.torch import save_file

            from ..backends.torch import build_model  # seeded weights: a float checkpoint first

            model = build_model(recipe)
            state = {n: t.contiguous() for n, t in model.state_dict().items()}
            if getattr(model.config, "tie_word_embeddings", False):
                state.pop("lm_head.weight", None)  # one tensor, saved under the embedding's name
            with tempfile.TemporaryDirectory(prefix="rbln-build-float-") as tmp:
                save_file(state, str(Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
                return write_quantized(Path(tmp), files, spec.quantized)

        entry = store.put(KIND, key, fill)
    quantized = inspect_checkpoint(entry.files).quantized  # what the compiler gets is checked, not assumed
    assert quantized is not None, entry.files
    recipe = replace(spec.recipe, weights_path=entry.files, seed=None, quantized=quantized)
    return replace(spec, recipe=recipe), {"stage_key": key, **entry.meta}


def measure_variant(spec: CompileSpec, compiled: CompileSpec, files: Path, produced: str) -> dict[str, Any] | None:
    """The quality figures (``_quality``) of a ``matrix.quantizations`` variant's compile, or None for a
    float one (and for a plan: no weights). ``spec``: the float spec; ``compiled``: what was compiled."""
    q = spec.quantization
    if q is None or q.is_none or not spec.recipe.has_weights or produced == "plan":
        return None
    from ._quality import measure, unmeasured

    if spec.recipe.quantized is not None:
        return unmeasured("the recipe's checkpoint is already quantized: no float weights to measure it against")
    import torch

    from ..backends.torch import PROGRAM_FILE, PagedCausalLM, build_model, empty_pools

    block = spec.attention.kvcache_block_size
    reference = PagedCausalLM(build_model(spec.recipe), block)
    variant: torch.nn.Module
    if produced == "program":  # the cell's CPU program itself
        variant = torch.export.load(str(files / PROGRAM_FILE)).module()
    else:  # an NPU program: the same quantized checkpoint, de-quantized, in the same paged wrapper
        variant = PagedCausalLM(build_model(compiled.recipe), block)
    return measure(
        variant,
        reference,
        lambda n: empty_pools(reference, n),
        recipe_dir=spec.recipe.directory,
        tokenizer_files=spec.recipe.tokenizer_files,
        max_seq_len=spec.attention.max_seq_len,
        block_size=block,
        batch_size=spec.attention.batch_size,
    )


def compile_record(store: Store, spec: CompileSpec, backend: str, impl: Backend, files: Path) -> dict[str, Any]:
    """Compile ``spec`` with ``impl`` into ``files``: a variant of float weights through its quantized
    checkpoint first (``quantized_spec``), then measured against the float weights
    (``measure_variant``). The compile entry's metadata."""
    compiled, stage = quantized_spec(store, spec)  # a variant of float weights: its checkpoint first
    result = impl.compile(compiled, files)
    quality = measure_variant(spec, compiled, files, result.produced)  # against the float weights
    return {
        "produced": result.produced,
        "report": result.report.to_json(),
        "spec": spec.key_fields(),
        "backend": backend,
        **({"quantized_checkpoint": stage} if stage is not None else {}),
        **({"quality": quality} if quality is not None else {}),
    }
