"""Byte units and the 2 MiB allocation granule: the one definition of each in rbln_build.

Units are binary, as optimum-rbln 0.12.0's byte strings are (``"1GB"`` is 2**30 bytes). The
compiler allocates DRAM in 2 MiB granules: optimum-rbln rounds every KV tensor up to 2 MiB *after*
scaling it to a block count (``align_2MB``), and rbln-build's NPU memory model rounds every tensor
the same way. Everything else imports these names; nothing writes the numbers again.
"""

from __future__ import annotations

__all__ = ["KiB", "MiB", "GiB", "TiB", "ALIGNMENT", "align", "align_2mib"]

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

ALIGNMENT = 2 * MiB  # the compiler's DRAM allocation granule


def align(nbytes: int, granule: int = ALIGNMENT) -> int:
    """``nbytes`` rounded up to a multiple of ``granule`` (2 MiB unless given), in exact integers."""
    return -(-nbytes // granule) * granule


def align_2mib(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of 2 MiB, as optimum-rbln's ``align_2MB`` rounds a KV tensor."""
    return align(nbytes, ALIGNMENT)
