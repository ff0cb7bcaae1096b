"""Quantized variants: optimum-rbln's formats as a matrix axis, and the rounding that makes them.

    _formats   Quantization (weights, activations, KV cache as RBLNQuantizationConfig names them),
               the variant names of ``matrix.quantizations``, the combinations refused, and the
               layer and scale names of optimum-rbln's checkpoint format
    _rtn       round-to-nearest per output channel into optimum-rbln's checkpoint format, and back
    _gate      matrix.quantizations parsed, a quality gate's limits checked, a cell's gate
    _text      the fixed text and prompts a variant's quality is measured on

This package sits below memory (it imports only errors): what config, memory and the backends
need. The stage that makes a variant's checkpoint in the Store and measures it is ``variants``.

Importing this package imports neither torch nor transformers (``_rtn`` does, lazily).
"""

from __future__ import annotations

from ._formats import (
    INPUT_SCALE_NAMES,
    KV_SCALE_NAMES,
    NONE,
    QUANTIZED_LINEARS,
    SCALE_NAMES,
    Quantization,
    from_weight_bits,
    parse_variant,
    variant_problem,
    weight_only,
)
from ._gate import gate_limit, parse_variants, quality_gate
from ._rtn import METHOD, QMAX, dequantized, is_target, quantize_state, quantize_tensor
from ._text import PROMPTS, TEXT, TEXT_VERSION

__all__ = [
    "INPUT_SCALE_NAMES",
    "KV_SCALE_NAMES",
    "METHOD",
    "NONE",
    "PROMPTS",
    "QMAX",
    "QUANTIZED_LINEARS",
    "Quantization",
    "SCALE_NAMES",
    "TEXT",
    "TEXT_VERSION",
    "dequantized",
    "from_weight_bits",
    "gate_limit",
    "is_target",
    "parse_variant",
    "parse_variants",
    "quantize_state",
    "quality_gate",
    "quantize_tensor",
    "variant_problem",
    "weight_only",
]
