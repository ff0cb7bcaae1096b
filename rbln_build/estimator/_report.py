"""The AllocationReport: the seam between a compile backend and the estimator.

It mirrors what a compiled model reports to optimum-rbln 0.12.0, and is all the estimator needs:

* ``alloc``: non-KV bytes per (node, chiplet), by graph and key::

      {"prefill": {"weights": [[bytes per chiplet] per node], "workspace": [...], ...},
       "decode":  {...}}

  Every key counts except ``DramTensor`` (KV tensors are reported separately).
  A node is one device of a tensor-parallel group; chiplets are that device's DRAM partitions.
  Graphs and keys need not cover the same (node, chiplet)s: as in optimum-rbln 0.12.0 they are
  summed into the union of what they mention, a missing entry counting 0 (``_pool``).
* ``kv_tensors``: each KV-cache tensor's bytes per (node, chiplet) at ``current_blocks`` blocks,
  and whether it can be resized (a sliding-window layer's cache cannot).
* ``current_blocks``: the block count the sizes in ``kv_tensors`` were measured at
  (1 for a compile baseline; N for an artifact that already holds N blocks).

Pure data: no torch, no I/O beyond (de)serialising plain JSON values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["KVTensor", "AllocationReport", "DRAM_TENSOR_KEY", "Grid"]

DRAM_TENSOR_KEY = "DramTensor"

Grid = tuple[tuple[int, ...], ...]  # [node][chiplet] -> bytes


def _grid(value: Any, where: str) -> Grid:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: expected a list of nodes, each a list of byte counts per chiplet, got {value!r}")
    rows = []
    for node_id, row in enumerate(value):
        if not isinstance(row, (list, tuple)):
            raise ValueError(f"{where}[{node_id}]: expected a list of byte counts per chiplet, got {row!r}")
        for chiplet_id, nbytes in enumerate(row):
            if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
                raise ValueError(
                    f"{where}[{node_id}][{chiplet_id}]: expected a non-negative integer byte count, got {nbytes!r}"
                )
        rows.append(tuple(row))
    return tuple(rows)


@dataclass(frozen=True)
class KVTensor:
    """One KV-cache tensor: bytes per (node, chiplet) at the report's ``current_blocks``."""

    can_resize: bool
    sizes: Grid

    def to_json(self) -> dict[str, Any]:
        return {"can_resize": self.can_resize, "sizes": [list(row) for row in self.sizes]}

    @classmethod
    def from_json(cls, value: Any, where: str = "kv_tensors") -> KVTensor:
        if not isinstance(value, dict) or set(value) != {"can_resize", "sizes"}:
            raise ValueError(f'{where}: expected {{"can_resize": bool, "sizes": [[...]]}}, got {value!r}')
        if not isinstance(value["can_resize"], bool):
            raise ValueError(f"{where}.can_resize: expected true or false, got {value['can_resize']!r}")
        return cls(can_resize=value["can_resize"], sizes=_grid(value["sizes"], f"{where}.sizes"))


@dataclass(frozen=True)
class AllocationReport:
    alloc: dict[str, dict[str, Grid]]
    kv_tensors: dict[str, KVTensor]
    current_blocks: int = 1
    notes: dict[str, Any] = field(default_factory=dict, compare=False)

    def non_kv_per_chiplet(self) -> dict[tuple[int, int], int]:
        """Sum of every non-KV key of every graph per (node, chiplet); ``DramTensor`` excluded."""
        out: dict[tuple[int, int], int] = {}
        for graph in self.alloc.values():
            for key, grid in graph.items():
                if key == DRAM_TENSOR_KEY:
                    continue
                for node_id, row in enumerate(grid):
                    for chiplet_id, nbytes in enumerate(row):
                        out[(node_id, chiplet_id)] = out.get((node_id, chiplet_id), 0) + nbytes
        return out

    def chiplets(self) -> set[tuple[int, int]]:
        """Every (node, chiplet) bucket that either the allocations or a KV tensor mention."""
        buckets = set(self.non_kv_per_chiplet())
        for tensor in self.kv_tensors.values():
            for node_id, row in enumerate(tensor.sizes):
                for chiplet_id in range(len(row)):
                    buckets.add((node_id, chiplet_id))
        return buckets

    def to_json(self) -> dict[str, Any]:
        """Plain JSON value with sorted keys for deterministic serialisation."""
        return {
            "alloc": {
                g: {k: [list(r) for r in grid] for k, grid in sorted(keys.items())}
                for g, keys in sorted(self.alloc.items())
            },
            "kv_tensors": {name: t.to_json() for name, t in sorted(self.kv_tensors.items())},
            "current_blocks": self.current_blocks,
        }

    @classmethod
    def from_json(cls, value: Any) -> AllocationReport:
        if not isinstance(value, dict):
            raise ValueError(f"report: expected an object with 'alloc' and 'kv_tensors', got {value!r}")
        alloc_in = value.get("alloc", {})
        kv_in = value.get("kv_tensors", {})
        if not isinstance(alloc_in, dict):
            raise ValueError(f"alloc: expected {{graph: {{key: [[bytes per chiplet] per node]}}}}, got {alloc_in!r}")
        if not isinstance(kv_in, dict):
            raise ValueError(f"kv_tensors: expected {{name: {{...}}}}, got {kv_in!r}")
        alloc: dict[str, dict[str, Grid]] = {}
        for graph, keys in alloc_in.items():
            if not isinstance(keys, dict):
                raise ValueError(f"alloc.{graph}: expected {{key: [[bytes per chiplet] per node]}}, got {keys!r}")
            alloc[graph] = {key: _grid(grid, f"alloc.{graph}.{key}") for key, grid in keys.items()}
        kv = {name: KVTensor.from_json(t, f"kv_tensors.{name}") for name, t in kv_in.items()}
        current = value.get("current_blocks", 1)
        if isinstance(current, bool) or not isinstance(current, int) or current < 1:
            raise ValueError(f"current_blocks: expected a positive integer, got {current!r}")
        return cls(alloc=alloc, kv_tensors=kv, current_blocks=current)
