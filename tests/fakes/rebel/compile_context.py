"""``rebel.compile_context.CompileContext``: what optimum-rbln 0.12.0 uses of it (stand-in)."""

from __future__ import annotations

from typing import Any


class CompileContext:
    """Shared between the graphs of one model: static (device-resident) tensors by name, and
    whether weights are shared (then only the first graph compiled with it holds them)."""

    def __init__(self, use_weight_sharing: bool = False) -> None:
        self.use_weight_sharing = use_weight_sharing
        self.static_names: list[str] = []
        self.weights_placed = False

    def mark_static_address(self, tensor: Any, name: str) -> None:
        if name not in self.static_names:
            self.static_names.append(name)
