"""One mode's plan, as the planner (``_planner``) answers it: each model's count, budget and what it
occupies per (node, chiplet) (``Assignment``), the objective's value (``Objective``), and, when no
plan fits, which models conflict and why (``ModePlan``)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ._conflict import Conflict
from ._inputs import Target
from ._search import Vector

__all__ = ["Objective", "Assignment", "ModePlan", "Proof", "PROOF_SEARCH"]


@dataclass(frozen=True)
class Proof:
    """Which solver found a plan, and whether it proved it optimal (``gap``: how much weighted share
    the optimum may have above it; ``note``: what was proven, in words)."""

    solver: str
    optimal: bool = True
    gap: Fraction = Fraction(0)
    note: str = "proven optimal"

    def to_json(self) -> dict[str, Any]:
        return {"solver": self.solver, "optimal": self.optimal, "gap": float(self.gap), "note": self.note}


PROOF_SEARCH = Proof("search")


@dataclass(frozen=True)
class Objective:
    min_share: Fraction
    weighted_share: Fraction
    total_blocks: int

    def to_json(self) -> dict[str, Any]:
        return {
            "min_share": float(self.min_share),
            "weighted_share": float(self.weighted_share),
            "total_blocks": self.total_blocks,
        }


@dataclass(frozen=True)
class Assignment:
    """One model in one plan. Vectors are flat per (node, chiplet), node-major (``Target.buckets``)."""

    name: str
    fixed: bool
    kvcache_num_blocks: int
    num_full_blocks: int
    num_min_blocks: int
    lower_bound: int
    weight: Fraction
    memory_budget: object  # what a cell is built with: the planned or fixed budget; None for an explicit count
    budget_bytes: int | None  # per device
    budget_fraction: float | None  # smallest float memory_budget resolving to >= budget_bytes
    usage: Vector  # bytes it occupies at its count: what the plan charges it

    @property
    def share(self) -> Fraction:
        return Fraction(self.kvcache_num_blocks, self.num_full_blocks)


@dataclass(frozen=True)
class ModePlan:
    mode: str
    target: Target
    feasible: bool
    assignments: tuple[Assignment, ...]  # in the deployment's order; empty when infeasible
    reserved: Vector
    objective: Objective | None
    conflict: tuple[str, ...] = ()  # infeasible: every model that cannot fit (in a minimal conflict)
    reason: str | None = None
    nodes: int = 0  # branch-and-bound nodes visited
    conflicts: tuple[Conflict, ...] = ()  # each of them with its reason
    margin: Vector = ()  # bytes held back per bucket (empty: none)
    proof: Proof = PROOF_SEARCH

    def assignment(self, name: str) -> Assignment:
        return next(a for a in self.assignments if a.name == name)

    def used(self) -> Vector:
        """Reservations plus what the models occupy, per bucket."""
        total = list(self.reserved)
        for a in self.assignments:
            for k, v in enumerate(a.usage):
                total[k] += v
        return tuple(total)

    def held(self) -> Vector:
        """The margin per bucket (zeros when there is none)."""
        return self.margin or (0,) * len(self.reserved)

    def headroom(self) -> Vector:
        """What is left per bucket once the reservations, the models and the margin are held."""
        available = self.target.available_per_chiplet
        return tuple(available - u - m for u, m in zip(self.used(), self.held(), strict=True))
