"""Quantized variants: optimum-rbln's formats as a matrix axis, made from float weights, measured.

    _formats   Quantization (weights, activations, KV cache as RBLNQuantizationConfig names them),
               the variant names of ``matrix.quantizations`` and the combinations refused
    _rtn       round-to-nearest per output channel into optimum-rbln's checkpoint format, and back
    _stage     the cached, content-addressed stage that makes a variant's checkpoint in the Store

Importing this package imports neither torch nor transformers (``_rtn`` and ``_stage`` do, lazily).
"""

from __future__ import annotations

from ._formats import NONE, Quantization, from_weight_bits, parse_variant, variant_problem, weight_only

__all__ = ["NONE", "Quantization", "from_weight_bits", "parse_variant", "variant_problem", "weight_only"]
