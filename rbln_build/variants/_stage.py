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

``measure_variant`` measures a compiled variant against its float weights; the float side (perplexity
and greedy tokens) is the same for every variant of one cell, so it is measured once per
``float_key`` (float weights, text, geometry) into ``cache/quality/<key>`` (its metadata). A compile
entry names both entries it used (``referenced``), and ``stage_keys`` says which a cell would use: gc
keeps them by those.
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

__all__ = ["quantized_spec", "measure_variant", "compile_record", "stage_keys", "referenced", "KIND", "FLOAT_KIND"]

KIND = "quantized"
FLOAT_KIND = "quality"  # the float side of a variant's quality figures, once per float_key


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
    from ..memory import inspect_checkpoint, weights_folder
    from ._write import write_quantized

    key = stage_key(spec)
    entry = store.lookup(KIND, key)
    if entry is None:

        def fill(files: Path) -> dict[str, Any]:
            recipe = spec.recipe
            if recipe.weights_path is not None:  # a GGUF's: de-quantized first, once (its own cache)
                return write_quantized(weights_folder(recipe), files, spec.quantized)
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
    # the stage's checkpoint is the weights now (a GGUF's folder is never this one: no ``gguf``)
    recipe = replace(spec.recipe, weights_path=entry.files, seed=None, quantized=quantized, gguf=None)
    return replace(spec, recipe=recipe), {"stage_key": key, **entry.meta}


def float_key(spec: CompileSpec) -> str:
    """The key of the float side's figures (``FLOAT_KIND``): the float weights, the text and prompts,
    and the geometry they are fed in; not the variant, so every variant of one cell shares it."""
    from ..quantization import TEXT_VERSION
    from ..store import digest
    from ._quality import GREEDY_TOKENS, MAX_TOKENS, MAX_WINDOW

    recipe, attention = spec.recipe, spec.attention
    return digest(
        {
            "stage": "float-quality/1",
            "recipe_hash": recipe.content_hash,
            "weights": recipe.weights_hash if recipe.weights_hash is not None else f"seed:{recipe.seed}",
            "text": TEXT_VERSION,
            "tokens": [MAX_TOKENS, MAX_WINDOW, GREEDY_TOKENS],
            "max_seq_len": attention.max_seq_len,
            "block_size": attention.kvcache_block_size,
            "batch_size": attention.batch_size,
        }
    )


def stage_keys(spec: CompileSpec) -> dict[str, str]:
    """The Store entries a compile of ``spec`` makes beside its own (kind -> key): what gc keeps for a
    cell not compiled yet. A compiled one names them in its entry (``referenced``)."""
    keys = {}
    if needs_stage(spec):
        keys[KIND] = stage_key(spec)
    if spec.quantization is not None and not spec.quantization.is_none and measurable(spec):
        keys[FLOAT_KIND] = float_key(spec)
    return keys


def referenced(meta: dict[str, Any]) -> dict[str, str]:
    """The stage entries a compile entry's metadata names (kind -> key)."""
    keys = {}
    stage = meta.get("quantized_checkpoint")
    if isinstance(stage, dict) and isinstance(stage.get("stage_key"), str):
        keys[KIND] = stage["stage_key"]
    quality = meta.get("quality")
    if isinstance(quality, dict) and isinstance(quality.get("float_key"), str):
        keys[FLOAT_KIND] = quality["float_key"]
    return keys


def _is_side(meta: dict[str, Any], prompts: int) -> bool:
    greedy, ppl = meta.get("greedy"), meta.get("perplexity")
    return (
        isinstance(ppl, float)
        and ppl > 0
        and isinstance(greedy, list)
        and len(greedy) == prompts
        and all(isinstance(g, list) and all(isinstance(t, int) for t in g) for g in greedy)
    )


def measurable(spec: CompileSpec) -> bool:
    return spec.recipe.has_weights and spec.recipe.quantized is None


def measure_variant(
    store: Store, spec: CompileSpec, compiled: CompileSpec, files: Path, produced: str
) -> dict[str, Any] | None:
    """The quality figures (``_quality``) of a ``matrix.quantizations`` variant's compile, or None for a
    float one (and for a plan: no weights). ``spec``: the float spec; ``compiled``: what was compiled.
    The float side is measured once per ``float_key`` (an entry of ``FLOAT_KIND`` in ``store``)."""
    q = spec.quantization
    if q is None or q.is_none or not spec.recipe.has_weights or produced == "plan":
        return None
    from ._quality import NO_TOKENIZER, compare, inputs, side, unmeasured

    if not measurable(spec):
        return unmeasured("the recipe's checkpoint is already quantized: no float weights to measure it against")
    fed = inputs(spec.recipe.directory, spec.recipe.tokenizer_files, spec.attention.max_seq_len)
    if fed is None:
        return unmeasured(NO_TOKENIZER)
    import torch

    from ..backends.torch import PROGRAM_FILE, PagedCausalLM, build_model, empty_pools

    block, batch = spec.attention.kvcache_block_size, spec.attention.batch_size
    reference = PagedCausalLM(build_model(spec.recipe), block)

    def pools(n: int) -> list[torch.Tensor]:
        made: list[torch.Tensor] = empty_pools(reference, n)
        return made

    key = float_key(spec)
    entry = store.lookup(FLOAT_KIND, key)
    floats = entry.meta if entry is not None else {}
    if not _is_side(floats, len(fed.prompts)):  # none yet (or not figures: then measured afresh, not trusted)
        entry = store.put(FLOAT_KIND, key, lambda _: side(reference, pools, fed, block_size=block, batch_size=batch))
        floats = entry.meta
    variant: torch.nn.Module
    if produced == "program":  # the cell's CPU program itself
        variant = torch.export.load(str(files / PROGRAM_FILE)).module()
    else:  # an NPU program: the same quantized checkpoint, de-quantized, in the same paged wrapper
        variant = PagedCausalLM(build_model(compiled.recipe), block)
    figures = side(variant, pools, fed, block_size=block, batch_size=batch)
    return {**compare(figures, floats, fed), "float_key": key}


def compile_record(store: Store, spec: CompileSpec, backend: str, impl: Backend, files: Path) -> dict[str, Any]:
    """Compile ``spec`` with ``impl`` into ``files``: a variant of float weights through its quantized
    checkpoint first (``quantized_spec``), then measured against the float weights
    (``measure_variant``). The compile entry's metadata."""
    compiled, stage = quantized_spec(store, spec)  # a variant of float weights: its checkpoint first
    result = impl.compile(compiled, files)
    quality = measure_variant(store, spec, compiled, files, result.produced)  # against the float weights
    return {
        "produced": result.produced,
        "report": result.report.to_json(),
        "spec": spec.key_fields(),
        "backend": backend,
        **({"quantized_checkpoint": stage} if stage is not None else {}),
        **({"quality": quality} if quality is not None else {}),
    }
