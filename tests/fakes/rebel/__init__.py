"""Stand-in for ``rebel`` (rebel-compiler 0.12), the proprietary Rebellions compiler. Tests only.

Only what optimum-rbln 0.12.0 calls on the way from ``RBLNAutoModelForCausalLM.from_pretrained(...,
export=True)`` to saved ``*.rbln`` files, and what rbln-build and optimum-rbln's CLI call on them:

* ``compile_from_torch(model, input_info, npu=..., num_devices=..., example_inputs=...,
  compile_context=...)`` traces the wrapped model under FakeTensorMode (so optimum-rbln's wrappers
  really run and call ``torch.ops.rbln_custom_ops.*``, registered by ``_ops``) and returns an
  ``RBLNCompiledModel``;
* ``RBLNCompiledModel``: ``get_alloc_per_chiplet_by_key()``, ``get_alloc_per_node_by_key()``,
  ``exp_get_dram_tensor_sizes()``, ``exp_multiply_buffer_size()``, ``exp_rescale_buffer_size()``,
  ``save(path)`` and loading from a path;
* host queries: no NPU here (``npu_is_available`` False, ``get_npu_name`` None, ``device_count`` 0),
  and ``Runtime`` cannot be created.

Allocation model (made up; only its shape is the real compiler's): every static tensor (the KV
caches marked with ``mark_static_address``) is a DRAM tensor of its exact byte size, split evenly
over the ``num_devices`` nodes and placed on chiplet ``layer * chiplets // layers``; the weights
(every parameter and buffer, once per weight-sharing context) are split evenly over all
(node, chiplet); the workspace is the 2 MiB-aligned bytes of the graph's other inputs and its output.
A compiled model file is deterministic JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch

from . import _ops
from .compile_context import CompileContext

__version__ = "0.12.0+standin"
FORMAT = "rebel-standin/1"
DRAM_TENSOR = "DramTensor"
_ALIGN = 2**21

COMPILES: list[dict[str, Any]] = []  # (graph inputs, npu, num_devices) per compile_from_torch, for tests
CALLS: list[tuple[str, str, Any]] = []  # (method, graph, argument) of buffer resizes and saves, for tests

__all__ = [
    "CompileContext",
    "RBLNCompiledModel",
    "Runtime",
    "compile",
    "compile_from_torch",
    "device_count",
    "get_npu_name",
    "npu_is_available",
]


def npu_is_available(device: int = 0) -> bool:
    return False


def get_npu_name(device: int = 0) -> str | None:
    return None


def device_count() -> int:
    return 0


def compile(*args: Any, num_devices: int = 1, **kwargs: Any) -> Any:  # noqa: A001 - the real name
    """Only its signature is used (optimum-rbln probes it for ``num_devices``)."""
    raise NotImplementedError("the rebel stand-in compiles only through compile_from_torch")


class Runtime:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("rebel stand-in: no NPU on this host; load with rbln_create_runtimes=False")


def _chiplets(npu: str) -> int:
    if npu.startswith("RBLN-CR"):
        return 4
    if npu.startswith("RBLN-CA"):
        return 1
    raise ValueError(f"rebel stand-in: unknown npu {npu!r}")


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _align(n: int) -> int:
    return math.ceil(n / _ALIGN) * _ALIGN


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _weights(model: torch.nn.Module) -> tuple[int, str]:
    digest = hashlib.sha256()
    total = 0
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        total += t.numel() * t.element_size()
        digest.update(name.encode() + b"\0" + t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return total, digest.hexdigest()


def compile_from_torch(
    model: torch.nn.Module,
    input_info: list[tuple[str, list[int], str]],
    npu: str | None = None,
    num_devices: int = 1,
    example_inputs: Any = None,
    compile_context: CompileContext | None = None,
    **kwargs: Any,
) -> RBLNCompiledModel:
    if npu is None:
        raise ValueError("rebel stand-in: npu is required (no NPU to ask on this host)")
    chiplets = _chiplets(npu)
    from torch._subclasses.fake_tensor import FakeTensorMode

    start = len(_ops.TRACED)
    with torch.no_grad(), FakeTensorMode(allow_non_fake_inputs=True):
        inputs = [torch.zeros(shape, dtype=_dtype(dtype)) for _, shape, dtype in input_info]
        output = model(*inputs)
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    traced_ops = sorted(set(_ops.TRACED[start:]))
    context = compile_context or CompileContext()
    static = [name for name, _, _ in input_info if name in context.static_names]
    layers = max(len(static) // 2, 1)
    dram: dict[str, list[list[int]]] = {}
    for name, shape, dtype in input_info:
        if name not in static:
            continue
        nbytes = math.prod(shape) * _dtype(dtype).itemsize
        chiplet = (static.index(name) // 2) * chiplets // layers
        dram[name] = [[size if c == chiplet else 0 for c in range(chiplets)] for size in _split(nbytes, num_devices)]
    weight_bytes, weight_digest = _weights(model)
    if context.use_weight_sharing and context.weights_placed:
        weight_bytes = 0
    context.weights_placed = True
    io_bytes = sum(math.prod(s) * _dtype(d).itemsize for n, s, d in input_info if n not in static)
    io_bytes += sum(o.numel() * o.element_size() for o in outputs if isinstance(o, torch.Tensor))
    per_chiplet = _split(weight_bytes, num_devices * chiplets)
    data = {
        "format": FORMAT,
        "npu": npu,
        "num_devices": num_devices,
        "inputs": [[n, list(s), d] for n, s, d in input_info],
        "custom_ops": traced_ops,
        "weights_sha256": weight_digest,
        "alloc": {
            "weights": [per_chiplet[n * chiplets : (n + 1) * chiplets] for n in range(num_devices)],
            "workspace": [[_align(io_bytes)] * chiplets for _ in range(num_devices)],
        },
        "dram_tensors": dram,
    }
    COMPILES.append({"inputs": data["inputs"], "npu": npu, "num_devices": num_devices, "custom_ops": traced_ops})
    return RBLNCompiledModel(data)


class RBLNCompiledModel:
    def __init__(self, source: str | Path | dict[str, Any]) -> None:
        if isinstance(source, dict):
            self._data = json.loads(json.dumps(source))
            self.name = "<memory>"
        else:
            path = Path(source)
            self._data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(self._data, dict) or self._data.get("format") != FORMAT:
                raise RuntimeError(f"rebel stand-in: {path} is not a compiled model")
            self.name = path.stem

    def get_alloc_per_chiplet_by_key(self) -> dict[str, list[list[int]]]:
        alloc = {k: [list(r) for r in v] for k, v in self._data["alloc"].items()}
        grids = list(self._data["dram_tensors"].values())
        if grids:
            alloc[DRAM_TENSOR] = [
                [sum(g[n][c] for g in grids) for c in range(len(grids[0][n]))] for n in range(len(grids[0]))
            ]
        return alloc

    def get_alloc_per_node_by_key(self) -> dict[str, list[int]]:
        return {k: [sum(row) for row in grid] for k, grid in self.get_alloc_per_chiplet_by_key().items()}

    def exp_get_dram_tensor_sizes(self) -> dict[str, list[list[int]]]:
        return {k: [list(r) for r in v] for k, v in self._data["dram_tensors"].items()}

    def _resize(self, name: str, target: int, current: int) -> None:
        if name not in self._data["dram_tensors"]:
            raise KeyError(f"rebel stand-in: no DRAM tensor {name!r} in {self.name}")
        for row in self._data["dram_tensors"][name]:
            for c, size in enumerate(row):
                if size * target % current:
                    raise ValueError(f"{name}: {size} bytes cannot be rescaled by {target}/{current} exactly")
                row[c] = size * target // current

    def exp_multiply_buffer_size(self, multipliers: dict[str, int]) -> None:
        CALLS.append(("exp_multiply_buffer_size", self.name, dict(multipliers)))
        for name, m in multipliers.items():
            self._resize(name, int(m), 1)

    def exp_rescale_buffer_size(self, ratios: dict[str, tuple[int, int]]) -> None:
        CALLS.append(("exp_rescale_buffer_size", self.name, dict(ratios)))
        for name, (target, current) in ratios.items():
            self._resize(name, int(target), int(current))

    def save(self, path: str | Path) -> None:
        CALLS.append(("save", self.name, Path(path).name))
        Path(path).write_text(json.dumps(self._data, sort_keys=True), encoding="utf-8")
