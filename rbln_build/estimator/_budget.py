"""``memory_budget``: its forms parsed, checked and printed, in this one place.

Accepted forms, the way optimum-rbln 0.12.0 reads them (the budget applies per device and resolves
against that device's available DRAM, i.e. the DRAM left after the system reserve of every chiplet):

=================  ==========================================================================
``None``           all available DRAM
``0.3``            a float in (0, 1]: that fraction, ``int(available * fraction)`` bytes
``"30%"``          text ending in ``%`` (after stripping whitespace) whose rest Python's ``float()``
                   reads, giving a value in (0%, 100%]: ``float(rest) / 100`` as a fraction
                   (so ``"1e2%"``, ``"+50%"``, ``"1_0%"`` and ``" 50 %"`` are valid too)
``10737418240``    an int: that many bytes (``1`` is one byte; ``1.0`` is 100%)
``"10GB"``         a byte string: an integer with an optional binary unit B, KB, MB, GB, TB
                   (KB = 2**10 ... TB = 2**40; case-insensitive; whitespace allowed)
=================  ==========================================================================

Anything else raises ``EstimateError(kind="invalid_budget")``; a fraction or percentage outside
(0, 1] (NaN and infinities included) is rejected with 0.12.0's sentence ``memory_budget fraction
must be in (0, 1] (or (0%, 100%]), got ...``. A budget above the available DRAM raises the
specification's ``memory_budget (N bytes) exceeds the target NPU's available DRAM (M bytes).``
(``kind="budget_exceeds_dram"``).

Printing: ``ACCEPTED_FORMS`` (the tail of every rejection), ``FORMS_SYNOPSIS`` and
``WORDS_SYNOPSIS`` (help texts: the forms as JSON values and as command-line words),
``format_budget`` (the budget's part of a cell id) and ``budget_from_text`` (a command-line word
back to a typed budget). Pure arithmetic: no torch, no I/O.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

from ..errors import EstimateError
from ._npu import NpuTarget
from ._units import GiB, KiB, MiB, TiB

__all__ = [
    "ACCEPTED_FORMS",
    "BYTE_UNITS",
    "FORMS_SYNOPSIS",
    "WORDS_SYNOPSIS",
    "ParsedBudget",
    "budget_from_text",
    "budget_hints",
    "check_budget",
    "format_budget",
    "fraction_for_bytes",
    "parse_budget",
    "resolve_budget",
]

BYTE_UNITS = {"B": 1, "KB": KiB, "MB": MiB, "GB": GiB, "TB": TiB}

# Every text about the forms is printed from these two: the tail of each rejection, and help texts.
ACCEPTED_FORMS = (
    "Accepted forms: null (all available DRAM), a float fraction in (0, 1] such as 0.3, "
    'a percentage string in (0%, 100%] such as "30%", a positive int byte count such as 10737418240, '
    'or a byte string with a binary unit B/KB/MB/GB/TB such as "10GB".'
)
FORMS_SYNOPSIS = 'null, 0.3, "30%", 10737418240 or "10GB"'  # the same forms, as JSON values
WORDS_SYNOPSIS = "a fraction (0.3), a percentage (30%), or bytes (10GB, 1073741824)"  # as budget_from_text reads them

# 0.12.0's pattern, read as it reads it: Unicode digits and whitespace ('١٠GB' is 10 GiB, as int()
# reads it), and a bounded length: no budget needs more than MAX_BUDGET_CHARS characters, and int()
# of a longer digit string is slow or refused.
_BYTE_STRING = re.compile(r"\s*(\d+)\s*([KMGT]?B)?\s*", re.IGNORECASE)
MAX_BUDGET_CHARS = 64


@dataclass(frozen=True)
class ParsedBudget:
    """A well-formed budget: a fraction of the available DRAM, a byte count, or neither (all of it)."""

    fraction: float | None = None
    nbytes: int | None = None

    def bytes_on(self, npu: NpuTarget) -> int:
        """Bytes per device on ``npu``; raises ``budget_exceeds_dram`` above its available DRAM."""
        available = npu.available_bytes
        if self.fraction is None and self.nbytes is None:
            return available
        # int(available * fraction), as the reference does; a tiny fraction may give 0 bytes, which is a
        # valid budget that nothing fits in (the estimator then reports insufficient memory).
        budget = int(available * self.fraction) if self.fraction is not None else self.nbytes
        assert budget is not None
        if budget > available:
            raise EstimateError(
                f"memory_budget ({budget} bytes) exceeds the target NPU's available DRAM ({available} bytes).",
                kind="budget_exceeds_dram",
            )
        return budget


def _invalid(message: str) -> EstimateError:
    return EstimateError(f"{message} {ACCEPTED_FORMS}", kind="invalid_budget")


def _out_of_range(memory_budget: object, hint: str = "") -> EstimateError:
    # optimum-rbln 0.12.0's sentence, word for word; NaN fails its range check the same way
    return _invalid(f"memory_budget fraction must be in (0, 1] (or (0%, 100%]), got {memory_budget!r}.{hint}")


def _fraction_of(memory_budget: float | str) -> float:
    """The fraction a float or ``"NN%"`` budget stands for; raises for anything outside (0, 1]."""
    if isinstance(memory_budget, float):
        fraction = memory_budget
        if not 0.0 < fraction <= 1.0:
            hint = ""
            if math.isfinite(fraction) and fraction > 1.0 and fraction == int(fraction):
                hint = f" A float is a fraction of the available DRAM; for a byte count pass an int ({int(fraction)})."
            raise _out_of_range(memory_budget, hint)
        return fraction
    # As optimum-rbln 0.12.0 reads it: Python's float() of the stripped text before the '%'.
    try:
        fraction = float(memory_budget.strip()[:-1]) / 100
    except ValueError:
        raise _invalid(
            f"memory_budget percentage {memory_budget!r} is malformed; expected a number followed by '%'."
        ) from None
    if not 0.0 < fraction <= 1.0:
        raise _out_of_range(memory_budget)
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
        scale = BYTE_UNITS.get(unit.upper()) if unit else 1
        if scale is None:  # a unit only Unicode case folding matches ('\u212aB', KELVIN SIGN): 0.12.0 raises KeyError
            raise _invalid(f"memory_budget {memory_budget!r} has the unit {unit!r}; use B, KB, MB, GB or TB.")
        nbytes = int(match.group(1)) * scale
    if nbytes <= 0:
        raise _invalid(f"memory_budget byte count must be positive, got {memory_budget!r}.")
    return nbytes


def parse_budget(memory_budget: object) -> ParsedBudget:
    """The form ``memory_budget`` has; raises ``EstimateError(kind="invalid_budget")`` if it has none."""
    if memory_budget is None:
        return ParsedBudget()
    if isinstance(memory_budget, bool):
        raise _invalid(f"memory_budget must not be a boolean, got {memory_budget!r}.")
    if isinstance(memory_budget, str) and len(memory_budget) > MAX_BUDGET_CHARS:
        raise _invalid(
            f"memory_budget is a string of {len(memory_budget)} characters, over the limit of {MAX_BUDGET_CHARS}."
        )
    if isinstance(memory_budget, float) or (isinstance(memory_budget, str) and memory_budget.strip().endswith("%")):
        return ParsedBudget(fraction=_fraction_of(memory_budget))
    if isinstance(memory_budget, (int, str)):
        return ParsedBudget(nbytes=_byte_count(memory_budget))
    raise _invalid(f"memory_budget has an unsupported type {type(memory_budget).__name__} ({memory_budget!r}).")


def check_budget(memory_budget: object) -> None:
    """Raise ``EstimateError(kind="invalid_budget")`` if ``memory_budget`` is not a valid form.

    What does not depend on the target: a config can be checked before anything is compiled. Whether
    the budget fits the NPU's DRAM is for ``resolve_budget``.
    """
    parse_budget(memory_budget)


def resolve_budget(memory_budget: object, npu: NpuTarget) -> int:
    """Bytes per device that ``memory_budget`` allows on ``npu``; see the module docstring."""
    return parse_budget(memory_budget).bytes_on(npu)


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


def format_budget(budget: object) -> str:
    """The budget's part of a cell id: ``none``, ``0.3``, ``1`` (an int), ``1.0`` (a float), ``10GB``,
    ``50pct``; a non-ASCII decimal digit is written as its ASCII digit (``'١٠GB'`` -> ``10GB``); other
    characters than letters, digits, ``.``, ``_`` and ``-`` become ``_``.

    Cell ids are published (README.md lists the default matrix's), so this never changes.
    """
    if budget is None:
        return "none"
    if isinstance(budget, bool):
        return "true" if budget else "false"
    if isinstance(budget, (int, float)):
        return repr(budget)
    text = str(budget).replace("%", "pct")
    text = "".join(
        str(unicodedata.decimal(c)) if not c.isascii() and unicodedata.decimal(c, None) is not None else c for c in text
    )
    return re.sub(r"[^A-Za-z0-9._-]", "_", text) or "_"


def budget_from_text(text: str) -> object:
    """The budget a command-line word stands for: ``30%`` and ``10GB`` stay strings, ``0.3`` and
    ``1e-1`` are floats (fractions), ``1073741824`` is an int (bytes). Only the word's type is decided
    here; whether it is a valid form is ``check_budget``'s call. Raises ``EstimateError``
    (``invalid_budget``) for an empty word or a number Python cannot read."""
    text = text.strip()
    if not text:
        raise _invalid("memory_budget is empty; write e.g. 0.3, 30% or 10GB.")
    if text.endswith("%") or any(c.isalpha() for c in text):
        return text
    try:
        return float(text) if "." in text or "e" in text.lower() else int(text)
    except ValueError:
        raise _invalid(f"memory_budget {text!r} cannot be read as a number; write e.g. 0.3, 30% or 10GB.") from None
