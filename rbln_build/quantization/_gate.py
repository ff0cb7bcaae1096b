"""The matrix's quantization axis as the config gives it: its variant names parsed (each once),
a quality gate's limits checked, and the gate a cell carries (``variants.gate_problem`` applies it).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ._formats import Quantization, parse_variant

__all__ = ["gate_limit", "parse_variants", "quality_gate"]


def parse_variants(where: str, values: Any) -> tuple[Quantization, ...] | None:
    """``matrix.quantizations`` (``where``) as plain values: variant names, each a combination
    optimum-rbln can compile, once."""
    if values is None:
        return None
    names = list(values)
    if not names:
        raise ConfigError(f"{where}: an empty list builds nothing; give at least one variant (none, w8, w4) or null.")
    out: list[Quantization] = []
    for i, name in enumerate(names):
        try:
            q = parse_variant(name, f"{where}[{i}]")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if q in out:
            raise ConfigError(f"{where}[{i}]: {name!r} is listed twice; list each variant once.")
        out.append(q)
    return tuple(out)


def gate_limit(where: str, value: Any, most: float = 1e6) -> float | None:
    """A quality gate's limit: a fraction in [0, most] (None: no gate)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= most:
        raise ConfigError(
            f"{where}: {value!r} is not a fraction between 0 and {most:g} (max_perplexity_increase 0.05: at most 5% "
            "above the float weights' perplexity; min_greedy_agreement 0.9: 90% of greedy tokens equal)."
        )
    return float(value)


def quality_gate(m: Any) -> tuple[tuple[str, float], ...] | None:
    """A matrix's quality gate: its limits that are set, as (name, limit) pairs (None: no gate)."""
    limits = (("max_perplexity_increase", m.max_perplexity_increase), ("min_greedy_agreement", m.min_greedy_agreement))
    gate = tuple((k, v) for k, v in limits if v is not None)
    return gate or None
