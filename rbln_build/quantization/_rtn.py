"""Round-to-nearest weight quantization into optimum-rbln 0.12.0's checkpoint format, and back.

``METHOD``: symmetric, per output channel. For each linear layer optimum-rbln quantizes
(``_formats.QUANTIZED_LINEARS``) with float weight ``W`` (out x in):
``scale = max|W[row]| / qmax`` (qmax 127 for int8, 7 for int4, 448 for fp8 e4m3; a zero row gets
scale 1) and ``Q = round(W / scale)`` clamped to [-qmax, qmax] as int8 (int4 values are held in int8,
as optimum-rbln's ``convert_to_qint_linear`` holds them), or ``W / scale`` cast (round to nearest
even) to float8_e4m3fn. The scale is written as ``<layer>.weight_scale`` (out x 1, float32: optimum-
rbln compiles quantized models in float32). Every other tensor is copied unchanged. The result is a
function of the float tensors alone: the same checkpoint gives byte-identical files.

``dequantized`` turns such a state (any scale name optimum-rbln accepts) back into float weights
``Q * scale``, what optimum-rbln's ``QIntLinear``/``QFloatLinear`` compute in their forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._formats import INPUT_SCALE_NAMES, KV_SCALE_NAMES, QUANTIZED_LINEARS, SCALE_NAMES, Quantization

if TYPE_CHECKING:
    import torch

__all__ = ["METHOD", "quantize_state", "quantize_tensor", "dequantized", "QMAX", "is_target"]

METHOD = "rtn-symmetric-per-output-channel/1"
QMAX = {"int8": 127.0, "int4": 7.0, "fp8": 448.0}


def is_target(name: str, tensor: torch.Tensor) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and parts[-1] == "weight" and parts[-2] in QUANTIZED_LINEARS and tensor.ndim == 2


def quantize_tensor(weight: torch.Tensor, weights: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(quantized weight, per-output-channel float32 scale of shape out x 1)."""
    import torch

    w = weight.to(torch.float32)
    qmax = QMAX[weights]
    amax = w.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
    if weights == "fp8":
        q = (w / scale).clamp(-qmax, qmax).to(torch.float8_e4m3fn)
    else:
        q = torch.round(w / scale).clamp(-qmax, qmax).to(torch.int8)
    return q.contiguous(), scale.contiguous()


def quantize_state(state: dict[str, torch.Tensor], q: Quantization) -> dict[str, torch.Tensor]:
    """``state`` with every linear layer optimum-rbln quantizes replaced by weight + weight_scale."""
    out: dict[str, torch.Tensor] = {}
    for name in sorted(state):
        tensor = state[name]
        if is_target(name, tensor):
            out[name], out[name[: -len("weight")] + "weight_scale"] = quantize_tensor(tensor, q.weights)
        else:
            out[name] = tensor.contiguous()
    return out


def dequantized(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A quantized state as float weights (``Q * scale`` in ``dtype``); calibration scales dropped."""
    import torch

    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        head, _, tail = name.rpartition(".")
        if tail in SCALE_NAMES or tail in INPUT_SCALE_NAMES or tail in KV_SCALE_NAMES:
            continue
        if tail == "weight" and tensor.dtype in (torch.int8, torch.float8_e4m3fn):
            scale = next(state[f"{head}.{s}"] for s in SCALE_NAMES if f"{head}.{s}" in state)
            scale = scale.to(torch.float32).reshape(-1, 1) if scale.numel() > 1 else scale.to(torch.float32)
            out[name] = (tensor.to(torch.float32) * scale).to(dtype)
        else:
            out[name] = tensor
    return out
