"""Checkpoints already quantized in optimum-rbln 0.12.0's format, told apart from float ones.

optimum-rbln's ``get_quantized_model`` (``transformers/utils/rbln_quantization.py``) replaces the
decoder's linear layers named ``q_proj k_proj v_proj o_proj gate_proj up_proj down_proj`` by
quantized ones and loads, for each, an integer (``int8``; int4 values are held in int8) or
``float8_e4m3fn`` weight and a per-output-channel scale under one of the names ``weight_scale``,
``scales``, ``w_scale``, ``scale``. A layer whose scale is absent keeps the scale of ones it was made
with, and a float weight is cast to int8: the layer's weights are then the float weights truncated
(all zero for a trained model's small values). So a checkpoint is quantized when ANY of those layers
has an integer/fp8 weight or a scale, and then EVERY one must have both; anything in between is
refused here, naming the tensors it lacks. Optional calibration scales (``input_scale`` and its
aliases, ``k_scale``/``v_scale``/``kv_scale``) are recorded: activation and KV-cache formats need them.

Standard library only (called from ``inspect_checkpoint``, on the no-op path).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import RecipeError
from ..quantization import INPUT_SCALE_NAMES, KV_SCALE_NAMES, QUANTIZED_LINEARS, SCALE_NAMES

__all__ = ["QuantizedLayout", "quantized_layout", "QUANTIZED_LINEARS", "SCALE_NAMES"]

QUANTIZED_DTYPES = {"I8": "int8", "F8_E4M3": "fp8"}  # safetensors dtype of a quantized weight -> its format

Tensors = dict[str, tuple[str, tuple[int, ...], str]]


@dataclass(frozen=True)
class QuantizedLayout:
    """What a quantized checkpoint holds: its weight storage, linear layers, and calibration scales."""

    storage: str  # "int8" (int8 or int4 values) or "fp8"
    linears: int  # how many linear layers are quantized
    scale_names: tuple[str, ...]  # the scale names used, sorted
    input_scales: bool  # activation scales present (needed by int8/fp8 activations)
    kv_scales: bool  # KV-cache scales present (needed by fp8 KV caches)
    quantized_tensors: frozenset[str]  # the quantized weights and every scale: not float checkpoint tensors


def _parent(name: str) -> tuple[str, str]:
    head, _, tail = name.rpartition(".")
    return head, tail


def _listed(names: list[str], most: int = 4) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" (and {len(names) - most} more)" if len(names) > most else "")


def quantized_layout(directory: Path, tensors: Tensors) -> QuantizedLayout | None:
    """None for a float checkpoint; the layout of one quantized in optimum-rbln's format; or a
    RecipeError naming what a partly quantized one (a float checkpoint with stray scales) lacks."""
    linears: dict[str, str] = {}  # module -> its weight's dtype
    scales: dict[str, str] = {}  # module -> its scale's name
    calibration: list[str] = []
    for name, (dtype, shape, _file) in tensors.items():
        module, tail = _parent(name)
        layer = _parent(module)[1]
        if layer in QUANTIZED_LINEARS:
            if tail == "weight" and len(shape) == 2:
                linears[module] = dtype
            elif tail in SCALE_NAMES:
                scales[module] = tail
        if tail in INPUT_SCALE_NAMES or tail in KV_SCALE_NAMES:
            calibration.append(name)
    quantized = sorted(m for m, d in linears.items() if d in QUANTIZED_DTYPES)
    if not quantized and not scales:
        return None
    float_weights = sorted(f"{m}.weight ({linears[m]})" for m in linears if linears[m] not in QUANTIZED_DTYPES)
    no_scale = sorted(f"{m}.weight_scale" for m in linears if m not in scales)
    stray = sorted(f"{m}.{s}" for m, s in scales.items() if m not in linears)
    storages = sorted({QUANTIZED_DTYPES[linears[m]] for m in quantized})
    if float_weights or no_scale or stray or len(storages) > 1:
        lacks = []
        if float_weights:
            lacks.append(f"integer or fp8 weights, but holds float ones: {_listed(float_weights)}")
        if no_scale:
            lacks.append(f"a scale ({' / '.join(SCALE_NAMES)}) for {_listed(no_scale)}")
        if stray:
            lacks.append(f"the linear weights of the scales {_listed(stray)}")
        if len(storages) > 1:
            lacks.append(f"one weight format, but mixes {' and '.join(storages)}")
        raise RecipeError(
            f"{directory}: a checkpoint quantized in optimum-rbln's format needs, for each of its {len(linears)} "
            f"linear layers ({', '.join(QUANTIZED_LINEARS)}), an int8 or float8_e4m3fn weight and a per-output-"
            f"channel scale; it lacks {'; and '.join(lacks)}. optimum-rbln would load the unscaled layers as "
            "zeros. Give a float checkpoint without scale tensors (rbln-build quantizes it: matrix.quantizations) "
            "or a completely quantized one."
        )
    tails = {_parent(n)[1] for n in calibration}
    return QuantizedLayout(
        storage=storages[0],
        linears=len(quantized),
        scale_names=tuple(sorted(set(scales.values()))),
        input_scales=bool(tails & set(INPUT_SCALE_NAMES)),
        kv_scales=bool(tails & set(KV_SCALE_NAMES)),
        quantized_tensors=frozenset(
            [f"{m}.weight" for m in quantized] + [f"{m}.{s}" for m, s in scales.items()] + calibration
        ),
    )
