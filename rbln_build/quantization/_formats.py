"""Quantization formats as optimum-rbln 0.12.0's ``RBLNQuantizationConfig`` names them, and the
variant names of the ``matrix.quantizations`` axis.

``RBLNQuantizationConfig(format="rbln", weights, activations, kv_caches)`` accepts weights ``int4
int8 fp8 fp16``, activations ``int8 fp8 fp16`` and kv_caches ``fp8 fp16``. A variant name spells
one combination: ``none`` (no quantization), else ``w<weights>[a<activations>][kv<kv_caches>]``
with ``8``/``4`` for int8/int4 and ``fp8``/``16`` as named, an omitted part fp16::

    w8  w4  wfp8             weight-only int8, int4, fp8 (activations and KV cache fp16)
    w8a8  wfp8afp8           weights and activations quantized
    w8kvfp8                  int8 weights, fp8 KV cache

What optimum-rbln 0.12.0 cannot do is refused at composition, one message per impossible
combination (``variant_problem``), read from its code: weights and activations both fp16 is
"meaningless" to its config even with an fp8 KV cache; fp16 weights have no quantized layer for
quantized activations; an integer linear layer (``QIntLinear``) clamps activations to int8 and has no
fp8 activation scale; an fp8 layer (``QFloatLinear``) creates no int8 activation scale.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "INPUT_SCALE_NAMES",
    "KV_SCALE_NAMES",
    "QUANTIZED_LINEARS",
    "SCALE_NAMES",
    "Quantization",
    "NONE",
    "parse_variant",
    "variant_problem",
    "weight_only",
    "from_weight_bits",
]

QUANTIZED_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # optimum-rbln's
SCALE_NAMES = ("weight_scale", "scales", "w_scale", "scale")  # its VARIANT_ALIASES["weight_scale"]
INPUT_SCALE_NAMES = ("input_scale", "act_scale", "activation_scale", "a_scale")
KV_SCALE_NAMES = ("kv_scale", "kv_scales", "k_scale", "k_scales", "v_scale", "v_scales")
_BITS = {"int8": 8, "int4": 4, "fp8": 8, "fp16": 16}
_PART = {"8": "int8", "4": "int4", "fp8": "fp8", "16": "fp16"}
_NAME = re.compile(r"w(?P<w>8|4|fp8|16)(?:a(?P<a>8|fp8|16))?(?:kv(?P<kv>fp8|16))?")


@dataclass(frozen=True)
class Quantization:
    """One of optimum-rbln's quantization combinations (``fp16`` everywhere: none)."""

    weights: str = "fp16"
    activations: str = "fp16"
    kv_caches: str = "fp16"

    @property
    def is_none(self) -> bool:
        return self == NONE

    @property
    def weight_bits(self) -> int:
        """The memory model's ``weight_bits``: 16, 8 (int8, fp8) or 4."""
        return _BITS[self.weights]

    @property
    def name(self) -> str:
        if self.is_none:
            return "none"
        short = {v: k for k, v in _PART.items()}
        return (
            f"w{short[self.weights]}"
            + ("" if self.activations == "fp16" else f"a{short[self.activations]}")
            + ("" if self.kv_caches == "fp16" else f"kv{short[self.kv_caches]}")
        )

    def rbln_option(self) -> dict[str, str] | None:
        """optimum-rbln's ``rbln_config["quantization"]`` (None: not quantized)."""
        if self.is_none:
            return None
        return {"format": "rbln", "weights": self.weights, "activations": self.activations, "kv_caches": self.kv_caches}

    def to_json(self) -> dict[str, str]:
        return {
            "name": self.name,
            "weights": self.weights,
            "activations": self.activations,
            "kv_caches": self.kv_caches,
        }


NONE = Quantization()


def weight_only(q: Quantization) -> bool:
    return q.activations == "fp16" and q.kv_caches == "fp16"


def from_weight_bits(bits: int) -> Quantization:
    """A recipe's ``quantization.weight_bits`` as a format: 16 none, 8 int8, 4 int4 (weight-only)."""
    return NONE if bits == 16 else Quantization(weights="int8" if bits == 8 else "int4")


def variant_problem(q: Quantization) -> str | None:
    """Why optimum-rbln 0.12.0 cannot compile ``q``, or None."""
    w, a, kv = q.weights, q.activations, q.kv_caches
    if w == "fp16" and a == "fp16" and kv != "fp16":
        return (
            f"a {kv} KV cache alone: optimum-rbln 0.12.0's RBLNQuantizationConfig refuses fp16 weights with fp16 "
            "activations ('meaningless') even with a quantized KV cache; quantize the weights too (w8kvfp8)"
        )
    if w == "fp16" and a != "fp16":
        return f"{a} activations with fp16 weights: optimum-rbln 0.12.0 quantizes activations only inside a quantized linear layer"
    if w in ("int8", "int4") and a == "fp8":
        return f"fp8 activations with {w} weights: optimum-rbln 0.12.0's integer layer clamps activations to int8 and has no fp8 scale"
    if w == "fp8" and a == "int8":
        return "int8 activations with fp8 weights: optimum-rbln 0.12.0's fp8 layer creates no int8 activation scale"
    return None


def parse_variant(value: object, where: str) -> Quantization:
    """A ``matrix.quantizations`` entry as a Quantization; ValueError(message) when it is not one
    or names a combination optimum-rbln cannot compile (``where`` prefixes the message)."""
    if not isinstance(value, str):
        raise ValueError(
            f"{where}: {value!r} is not a variant name; use none, w8, w4, wfp8, w8a8, wfp8afp8, w8kvfp8 ..."
        )
    if value == "none":
        return NONE
    m = _NAME.fullmatch(value)
    if m is None:
        raise ValueError(
            f"{where}: {value!r} is not a variant name; use none or w<8|4|fp8>[a<8|fp8>][kv<fp8>] "
            "(w8, w4, wfp8, w8a8, wfp8afp8, w8kvfp8)."
        )
    q = Quantization(_PART[m["w"]], _PART[m["a"] or "16"], _PART[m["kv"] or "16"])
    problem = variant_problem(q)
    if problem is not None:
        raise ValueError(f"{where}: {value!r} asks for {problem}.")
    if q.name != value:
        raise ValueError(f"{where}: {value!r} spells {q.name!r}; write it that way (one name per variant).")
    return q
