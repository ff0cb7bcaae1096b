"""NPU targets: DRAM, chiplets and attention limits per family, as optimum-rbln 0.12.0 defines them.

``RBLN-CA*`` is ATOM™(-Max): 16 GiB on 1 chiplet, 288 MiB reserved by the system.
``RBLN-CR*`` is Rebel100™-class: 144 GiB on 4 chiplets, 1 GiB reserved per chiplet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import EstimateError
from ._units import GiB, MiB

__all__ = ["AttentionLimits", "NpuTarget", "resolve_npu", "NPU_ALIASES", "KNOWN_FAMILIES"]


@dataclass(frozen=True)
class AttentionLimits:
    name: str
    max_eager_seq_len: int
    min_flash_partition_len: int
    max_flash_partition_len: int
    default_flash_partition_len: int
    max_sliding_window: int

    @property
    def min_flash_max_seq_len(self) -> int:
        return 2 * self.min_flash_partition_len  # flash attention needs two partitions at least


_ATOM_LIMITS = AttentionLimits("ATOM", 32_768, 1_024, 32_768, 16_384, 32_768)
_REBEL_LIMITS = AttentionLimits("REBEL", 16_384, 1_024, 16_384, 8_192, 32_767)


# Friendly names; each maps to a representative NPU name of its family.
NPU_ALIASES = {
    "atom": "RBLN-CA25",
    "atom_max": "RBLN-CA25",
    "atom-max": "RBLN-CA25",
    "rebel": "RBLN-CR03",
    "rebel100": "RBLN-CR03",
}


@dataclass(frozen=True)
class NpuTarget:
    """One NPU of a family; ``available_bytes`` is what a budget of 100% resolves to."""

    name: str
    family: str
    product: str
    dram_bytes: int
    num_chiplets: int
    reserved_per_chiplet: int
    default_prefill_chunk_size: int
    limits: AttentionLimits

    @property
    def available_per_chiplet(self) -> int:
        return self.dram_bytes // self.num_chiplets - self.reserved_per_chiplet

    @property
    def available_bytes(self) -> int:
        return self.available_per_chiplet * self.num_chiplets

    def split_over(self, num_chiplets: int) -> NpuTarget:
        """This NPU with its DRAM split over ``num_chiplets`` chiplets, as optimum-rbln 0.12.0 splits it
        for a report that covers that many (``get_available_dram_per_chiplet``): each chiplet gets
        ``dram_bytes // num_chiplets`` less the per-chiplet reserve."""
        return self if num_chiplets == self.num_chiplets else replace(self, num_chiplets=num_chiplets)


# One template per family; resolve_npu fills in the NPU's own name.
_FAMILIES = (
    NpuTarget("RBLN-CA*", "RBLN-CA", "ATOM-Max", 16 * GiB, 1, 288 * MiB, 128, _ATOM_LIMITS),
    NpuTarget("RBLN-CR*", "RBLN-CR", "Rebel100", 144 * GiB, 4, 1 * GiB, 512, _REBEL_LIMITS),
)
KNOWN_FAMILIES = tuple(f.name for f in _FAMILIES)


def resolve_npu(name: object) -> NpuTarget:
    """An NPU name (``RBLN-CA25``, ``rbln-cr03``) or alias (``atom_max``, ``rebel100``) → target."""
    if not isinstance(name, str) or not name.strip():
        raise EstimateError(
            f"npu: expected an NPU name such as 'RBLN-CA25' or 'RBLN-CR03' (or an alias: "
            f"{', '.join(sorted(NPU_ALIASES))}), got {name!r}.",
            kind="unknown_npu",
        )
    key = name.strip()
    canonical = NPU_ALIASES.get(key.lower(), key.upper())
    for family in _FAMILIES:
        if canonical.startswith(family.family):
            return replace(family, name=canonical)
    raise EstimateError(
        f"Unknown npu name: {name}. Known NPU families: {', '.join(KNOWN_FAMILIES)}; "
        f"aliases: {', '.join(sorted(NPU_ALIASES))}.",
        kind="unknown_npu",
    )
