"""What a backend compiles: a recipe for an NPU target, on a number of devices, with resolved
attention options. The memory model reads it (``build_report``); backends compile it; the build
hashes ``key_fields()`` into the compile key. Budget and block count are not part of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..estimator import AttentionConfig, NpuTarget, attention_options, resolve_attention
from ..quantization import Quantization, from_weight_bits
from ._recipes import Recipe

__all__ = ["CompileSpec"]


@dataclass(frozen=True)
class CompileSpec:
    """Everything that changes what a backend compiles. Budget and block count are not here."""

    recipe: Recipe
    npu: NpuTarget
    num_devices: int
    attention: AttentionConfig
    quantization: Quantization | None = None  # a matrix.quantizations variant; None: the recipe's own

    @property
    def quantized(self) -> Quantization:
        """The format its weights compile in: the variant's, else the recipe's ``weight_bits``."""
        return self.quantization if self.quantization is not None else from_weight_bits(self.recipe.weight_bits)

    @classmethod
    def for_recipe(cls, recipe: Recipe, npu: NpuTarget, num_devices: int = 1, **options: Any) -> CompileSpec:
        """The recipe's ``build:`` defaults, overridden by ``options`` (``None`` keeps the default),
        resolved for ``npu`` as optimum-rbln would. Raises EstimateError for invalid attention options."""
        opts = {**recipe.build, **{k: v for k, v in options.items() if v is not None}}
        attention = resolve_attention(npu, **attention_options(opts))
        return cls(recipe=recipe, npu=npu, num_devices=num_devices, attention=attention)

    def key_fields(self) -> dict[str, Any]:
        """Canonical, path-free inputs for the compile key (the backend adds its toolchain)."""
        fields = {
            "recipe": self.recipe.name,
            "recipe_hash": self.recipe.content_hash,
            "npu_family": self.npu.family,
            "num_devices": self.num_devices,
            "attention": self.attention.to_json(),
        }
        if self.recipe.weights_hash is not None:  # a local checkpoint: its content is an input
            fields["weights_hash"] = self.recipe.weights_hash
        if self.quantization is not None and not self.quantization.is_none:  # a variant: keys of others unchanged
            from ..quantization import METHOD, TEXT_VERSION  # how its weights are made and measured: versioned here

            fields["quantization"] = {**self.quantization.to_json(), "method": METHOD, "quality": TEXT_VERSION}
        return fields
