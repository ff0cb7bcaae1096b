"""Stand-in for ``rebel`` (rebel-compiler): a compiled model is a JSON file. Tests only."""

from __future__ import annotations

import json
from pathlib import Path

__version__ = "0.0.0+fake"

CALLS: list[tuple[str, str, object]] = []  # (method, graph, argument), for assertions


class RBLNCompiledModel:
    def __init__(self, path: str | Path) -> None:
        self._data = json.loads(Path(path).read_text())
        self.graph = self._data["graph"]

    def get_alloc_per_chiplet_by_key(self) -> dict[str, list[list[int]]]:
        alloc = {k: [list(r) for r in v] for k, v in self._data["alloc"].items()}
        total = [[0] * len(row) for row in next(iter(self._data["dram_tensors"].values()))]
        for grid in self._data["dram_tensors"].values():
            for n, row in enumerate(grid):
                for c, size in enumerate(row):
                    total[n][c] += size
        alloc["DramTensor"] = total  # the real compiler reports KV buffers under this key too
        return alloc

    def exp_get_dram_tensor_sizes(self) -> dict[str, list[list[int]]]:
        return {k: [list(r) for r in v] for k, v in self._data["dram_tensors"].items()}

    def exp_rescale_buffer_size(self, ratios: dict[str, tuple[int, int]]) -> None:
        CALLS.append(("exp_rescale_buffer_size", self.graph, dict(ratios)))
        for name, (target, current) in ratios.items():
            grid = self._data["dram_tensors"][name]
            for row in grid:
                for c, size in enumerate(row):
                    if size * target % current:
                        raise ValueError(f"{name}: {size} bytes cannot be rescaled by {target}/{current} exactly")
                    row[c] = size * target // current

    def save(self, path: str | Path) -> None:
        CALLS.append(("save", self.graph, Path(path).name))
        Path(path).write_text(json.dumps(self._data, sort_keys=True))
