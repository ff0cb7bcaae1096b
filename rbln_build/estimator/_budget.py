"""``memory_budget`` → bytes per device, the way optimum-rbln 0.12.0 resolves it.

Accepted forms (the budget applies per device and resolves against that device's available DRAM,
i.e. the DRAM left after the system reserve of every chiplet):

=================  ==========================================================================
``None``           all available DRAM
``0.3``            a float in (0, 1]: that fraction, ``int(available * fraction)`` bytes
``"30%"``          a percentage in (0%, 100%]: ``float("30") / 100`` as a fraction
``10737418240``    an int: that many bytes (``1`` is one byte; ``1.0`` is 100%)
``"10GB"``         a byte string: an integer with an optional binary unit B, KB, MB, GB, TB
                   (KB = 2**10 ... TB = 2**40; case-insensitive; whitespace allowed)
=================  ==========================================================================

Anything else raises ``EstimateError(kind="invalid_budget")``; a budget above the available DRAM
raises the specification's ``memory_budget (N bytes) exceeds the target NPU's available DRAM
(M bytes).`` (``kind="budget_exceeds_dram"``). Pure arithmetic: no torch, no I/O.
"""

from __future__ import annotations

import math
import re

from ..errors import EstimateError
from ._npu import NpuTarget

__all__ = ["resolve_budget", "check_budget", "budget_hints", "fraction_for_bytes", "BYTE_UNITS", "ACCEPTED_FORMS"]

BYTE_UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
MiB = 2**20

ACCEPTED_FORMS = (
    "Accepted forms: null (all available DRAM), a float fraction in (0, 1] such as 0.3, "
    'a percentage string in (0%, 100%] such as "30%", a positive int byte count such as 10737418240, '
    'or a byte string with a binary unit B/KB/MB/GB/TB such as "10GB".'
)

_BYTE_STRING = re.compile(r"\s*(\d+)\s*([KMGT]?B)?\s*", re.IGNORECASE)
_PERCENT_STRING = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*%\s*")


def _invalid(message: str) -> EstimateError:
    return EstimateError(f"{message} {ACCEPTED_FORMS}", kind="invalid_budget")


def _fraction_of(memory_budget: float | str) -> float:
    """The fraction a float or ``"NN%"`` budget stands for; raises for anything outside (0, 1]."""
    if isinstance(memory_budget, float):
        fraction = memory_budget
        if math.isnan(fraction) or math.isinf(fraction):
            raise _invalid(f"memory_budget must be a finite fraction in (0, 1], got {memory_budget!r}.")
        if not 0.0 < fraction <= 1.0:
            hint = ""
            if fraction > 1.0 and fraction == int(fraction):
                hint = f" A float is a fraction of the available DRAM; for a byte count pass an int ({int(fraction)})."
            raise _invalid(f"memory_budget fraction must be in (0, 1] (or (0%, 100%]), got {memory_budget!r}.{hint}")
        return fraction
    match = _PERCENT_STRING.fullmatch(memory_budget)
    if match is None:
        raise _invalid(f"memory_budget percentage {memory_budget!r} is malformed; expected a number followed by '%'.")
    # Same arithmetic as optimum-rbln 0.12.0: float(text) / 100, so "30%" is exactly the float 0.3.
    fraction = float(match.group(1)) / 100
    if not 0.0 < fraction <= 1.0:
        raise _invalid(f"memory_budget fraction must be in (0, 1] (or (0%, 100%]), got {memory_budget!r}.")
    return fraction


def _byte_count(memory_budget: int | str) -> int:
    if isinstance(memory_budget, int):
        nbytes = memory_budget
    else:
        match = _BYTE_STRING.fullmatch(memory_budget)
        if match is None:
            raise _invalid(
                f"memory_budget {memory_budget!r} is not a valid byte size; expected an integer optionally "
                "suffixed with B, KB, MB, GB or TB (e.g. '10GB')."
            )
        unit = match.group(2)
        nbytes = int(match.group(1)) * (BYTE_UNITS[unit.upper()] if unit else 1)
    if nbytes <= 0:
        raise _invalid(f"memory_budget byte count must be positive, got {memory_budget!r}.")
    return nbytes


def _parse(memory_budget: object) -> tuple[float | None, int | None]:
    """(fraction, None) or (None, bytes); (None, None) for ``None``. Raises for a malformed form."""
    if memory_budget is None:
        return None, None
    if isinstance(memory_budget, bool):
        raise _invalid(f"memory_budget must not be a boolean, got {memory_budget!r}.")
    if isinstance(memory_budget, float) or (isinstance(memory_budget, str) and memory_budget.strip().endswith("%")):
        return _fraction_of(memory_budget), None
    if isinstance(memory_budget, (int, str)):
        return None, _byte_count(memory_budget)
    raise _invalid(f"memory_budget has an unsupported type {type(memory_budget).__name__} ({memory_budget!r}).")


def check_budget(memory_budget: object) -> None:
    """Raise ``EstimateError(kind="invalid_budget")`` if ``memory_budget`` is not a valid form.

    What does not depend on the target: a config can be checked before anything is compiled. Whether
    the budget fits the NPU's DRAM is for ``resolve_budget``.
    """
    _parse(memory_budget)


def resolve_budget(memory_budget: object, npu: NpuTarget) -> int:
    """Bytes per device that ``memory_budget`` allows on ``npu``; see the module docstring."""
    available = npu.available_bytes
    fraction, nbytes = _parse(memory_budget)
    if fraction is None and nbytes is None:
        return available
    # int(available * fraction), as the reference does; a tiny fraction may give 0 bytes, which is a
    # valid budget that nothing fits in (the estimator then reports insufficient memory).
    budget = int(available * fraction) if fraction is not None else nbytes
    assert budget is not None
    if budget > available:
        raise EstimateError(
            f"memory_budget ({budget} bytes) exceeds the target NPU's available DRAM ({available} bytes).",
            kind="budget_exceeds_dram",
        )
    return budget


def budget_hints(memory_budget: object) -> tuple[str, ...]:
    """Warnings for a budget that is valid but probably not what was meant."""
    if isinstance(memory_budget, int) and not isinstance(memory_budget, bool) and 0 < memory_budget < MiB:
        return (
            f"memory_budget is the int {memory_budget}, i.e. {memory_budget} byte(s), less than 1 MiB. "
            "An int is a byte count: `1` is one byte, while the float `1.0` is 100% of the available DRAM.",
        )
    return ()


def fraction_for_bytes(nbytes: int, available: int) -> float | None:
    """The smallest float ``f`` in (0, 1] with ``int(available * f) >= nbytes``, or None if none exists.

    This is the fraction to pass as ``memory_budget`` to get at least ``nbytes`` per device, given
    that a fraction resolves through ``int(available * f)`` (floating-point, as the reference does).
    """
    if nbytes > available or available <= 0:
        return None
    if nbytes <= 0:
        nbytes = 1
    f = nbytes / available
    while int(available * f) < nbytes:
        f = math.nextafter(f, math.inf)
    while True:
        lower = math.nextafter(f, 0.0)
        if lower <= 0.0 or int(available * lower) < nbytes:
            break
        f = lower
    return min(f, 1.0)
