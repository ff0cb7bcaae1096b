"""A model's geometry: the architecture facts the memory model and the backends need, read from its
published ``config.json`` (standard library only; errors name the file and the key)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RecipeError
from ..estimator import count_problem

__all__ = ["Geometry", "geometry_from_config"]


@dataclass(frozen=True)
class Geometry:
    """The architecture facts the memory model and the backends need, read from config.json."""

    model_type: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    layer_types: tuple[str, ...]  # "full_attention" or "sliding_attention" per layer
    sliding_window: int | None


# Defaults of transformers' config classes for fields a published config.json may omit.
# Gemma 3 ties its embeddings by default and google/gemma-3-1b-it does not spell it out.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text"}


def _tie_default(model_type: object) -> bool:
    return model_type in _TIED_BY_DEFAULT


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    # Multimodal configs (Gemma 3) keep the decoder under text_config.
    text = cfg.get("text_config")
    return text if isinstance(text, dict) else cfg


def geometry_from_config(cfg: dict[str, Any], where: Path) -> Geometry:
    c = _text_config(cfg)

    def need(key: str) -> int:
        if key not in c:
            raise RecipeError(f"{where}: missing '{key}' (a published HF config.json has it); add it to the file.")
        return _count(where, c, key)

    num_layers = need("num_hidden_layers")
    heads = need("num_attention_heads")
    hidden = need("hidden_size")
    head_dim = _count(where, c, "head_dim") if c.get("head_dim") is not None else hidden // heads
    if head_dim < 1:
        raise RecipeError(f"{where}: hidden_size {hidden} is smaller than num_attention_heads {heads}; set head_dim.")
    layer_types = c.get("layer_types")
    sliding = _count(where, c, "sliding_window") if c.get("sliding_window") is not None else None
    if layer_types is not None and not (isinstance(layer_types, list) and all(isinstance(t, str) for t in layer_types)):
        raise RecipeError(f"{where}: 'layer_types' must be a list of layer type names, got {layer_types!r}.")
    if layer_types is None and sliding is not None and c.get("sliding_window_pattern"):
        # Gemma 3 configs published before `layer_types` existed: every `sliding_window_pattern`-th
        # layer is full attention, the others slide (as transformers' Gemma3TextConfig derives it).
        pattern = _count(where, c, "sliding_window_pattern")
        layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]
    if layer_types is None:
        uses_window = sliding is not None and c.get("use_sliding_window", True)
        kind = "sliding_attention" if uses_window else "full_attention"
        layer_types = [kind] * num_layers
    if len(layer_types) != num_layers:
        raise RecipeError(
            f"{where}: 'layer_types' has {len(layer_types)} entries but num_hidden_layers is {num_layers}."
        )
    for t in layer_types:
        if t not in ("full_attention", "sliding_attention"):
            raise RecipeError(f"{where}: layer type {t!r} is not 'full_attention' or 'sliding_attention'.")
    return Geometry(
        model_type=str(c.get("model_type", cfg.get("model_type", ""))),
        num_layers=num_layers,
        hidden_size=hidden,
        intermediate_size=need("intermediate_size"),
        num_attention_heads=heads,
        num_key_value_heads=_count(where, c, "num_key_value_heads") if c.get("num_key_value_heads") else heads,
        head_dim=head_dim,
        vocab_size=need("vocab_size"),
        tie_word_embeddings=bool(
            cfg.get("tie_word_embeddings", c.get("tie_word_embeddings", _tie_default(c.get("model_type"))))
        ),
        layer_types=tuple(layer_types),
        sliding_window=sliding if sliding is not None and "sliding_attention" in layer_types else None,
    )


def _count(where: Path, c: dict[str, Any], key: str) -> int:
    """``c[key]`` as a count within its bound (rbln_build.estimator._limits); else a RecipeError naming the file."""
    problem = count_problem(key, c[key])
    if problem is not None:
        raise RecipeError(f"{where}: '{key}': {problem}.")
    return c[key]  # type: ignore[no-any-return]
