"""Model weights for a recipe: generated from a seed, or loaded from a local safetensors checkpoint.

Seeded weights are byte-identical on every machine for one seed: every parameter gets its own
``torch.Generator`` seeded from ``sha256(f"{seed}:{name}")``, parameters are visited in sorted
name order, and the init scale is fixed by the parameter's role (not by the model's
``initializer_range``), so adding a parameter never changes the others. Tied weights
(``lm_head.weight`` tied to the embeddings) are one parameter and are set once.

The scales are chosen so a tiny random model has well-separated logits: greedy decoding then
does not hinge on float rounding, which token-equality tests need.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ...errors import RecipeError

if TYPE_CHECKING:
    from ...memory import Recipe

__all__ = ["build_model", "seeded_state_dict", "load_weights", "param_seed"]

# A gain above 1 on linear layers keeps a tiny random model out of the "repeat the last token"
# regime (tied embeddings otherwise dominate the logits) and widens the top-1 logit margin.
_LINEAR_GAIN = 3.0

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def param_seed(seed: int, name: str) -> int:
    """The generator seed of one parameter: stable across machines, Python versions and processes."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _init_tensor(name: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator(device="cpu")
    g.manual_seed(param_seed(seed, name))
    noise = torch.randn(shape, generator=g, dtype=torch.float32)
    if len(shape) == 1:
        if name.endswith("norm.weight") or "layernorm" in name or "norm" in name.rsplit(".", 2)[-2]:
            return 1.0 + 0.1 * noise  # norm gains around 1
        return 0.02 * noise  # biases
    if "embed" in name:
        return noise  # unit-variance embeddings
    return _LINEAR_GAIN * noise / math.sqrt(shape[-1])


def seeded_state_dict(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic values for every (deduplicated) parameter of ``model``, by name."""
    params = dict(model.named_parameters())  # tied parameters appear once
    return {name: _init_tensor(name, tuple(params[name].shape), seed) for name in sorted(params)}


def load_weights(model: torch.nn.Module, directory: Path) -> None:
    """Load every ``*.safetensors`` file of a local HF checkpoint directory into ``model``."""
    from safetensors.torch import load_file

    from ...memory import INDEX_FILE, inspect_checkpoint

    checkpoint = inspect_checkpoint(Path(directory))  # present and complete, or an error naming the file
    state: dict[str, torch.Tensor] = {}
    for f in checkpoint.files:
        if f.name != INDEX_FILE:
            state.update(load_file(str(f)))
    if checkpoint.quantized is not None:  # optimum-rbln's format: run the quantized weights, de-quantized
        from ...quantization import dequantized

        state = dequantized(state, next(model.parameters()).dtype)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a shape mismatch: name the tensor and the file it came from
        first = str(exc).strip().splitlines()[-1].strip()
        name = first.split(":", 1)[0].replace("size mismatch for", "").strip()
        where = checkpoint.tensors.get(name, (None, None, "?"))[2]
        raise RecipeError(
            f"{Path(directory) / where}: checkpoint does not match the config ({first}); "
            "check that config.json belongs to these weights."
        ) from None
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = [m for m in missing if m not in tied]
    if missing or unexpected:
        raise RecipeError(
            f"{directory}: checkpoint does not match the config (missing: {sorted(missing)[:5]}, "
            f"unexpected: {sorted(unexpected)[:5]}); check that config.json belongs to these weights."
        )


def build_model(recipe: Recipe, attn_implementation: str = "eager") -> torch.nn.Module:
    """The HF causal LM of ``recipe`` with its weights, in eval mode, in the recipe's dtype."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if not recipe.has_weights:
        raise RecipeError(
            f"recipe '{recipe.name}': no weights (weights: null); only a plan can be built. "
            "Set weights: {path: DIR} to a local checkpoint to build a program."
        )
    cfg = dict(recipe.hf_config)
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg)
    config._attn_implementation = attn_implementation
    dtype = _TORCH_DTYPES[recipe.dtype]
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if recipe.seed is not None:
        state = seeded_state_dict(model, recipe.seed)
        with torch.no_grad():
            params = dict(model.named_parameters())
            for name, value in state.items():
                params[name].copy_(value.to(dtype))
    else:
        from ...memory import weights_folder

        assert recipe.weights_path is not None
        load_weights(model, weights_folder(recipe))
    return model.eval()
