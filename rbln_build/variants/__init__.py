"""A quantized variant made and measured: the stages that run programs (above store and backends).

    _stage     the cached, content-addressed stage that makes a variant's checkpoint in the Store,
               and the measuring of a compiled variant against its float weights (the float side
               cached once per text and geometry); the entries a compile uses, for gc
    _write     a float checkpoint written as a quantized one (``quantization.quantize_state``)
    _quality   a variant's quality on CPU: perplexity and greedy agreement, and the gate on them

The formats and the rounding themselves are ``quantization`` (below memory).

Importing this package imports neither torch nor transformers (its functions do, lazily).
"""

from __future__ import annotations

from ._quality import GREEDY_TOKENS, MAX_WINDOW, gate_problem, measure, unmeasured
from ._stage import FLOAT_KIND, KIND, compile_record, measure_variant, quantized_spec, referenced, stage_keys
from ._write import write_quantized

__all__ = [
    "GREEDY_TOKENS",
    "KIND",
    "FLOAT_KIND",
    "referenced",
    "stage_keys",
    "compile_record",
    "MAX_WINDOW",
    "gate_problem",
    "measure",
    "measure_variant",
    "quantized_spec",
    "unmeasured",
    "write_quantized",
]
