"""A deployment model's traffic, and the deployment's byte counts and margins, as the config gives
them, checked and turned into ``Traffic``, bytes and ``Margin`` (``config._deployment`` reads the node;
the rules and their one-line errors live here, beside the planner that uses them)."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from ..errors import ConfigError
from ..estimator import BYTE_UNITS, LIMITS
from ._inputs import Margin, Traffic

__all__ = ["bounded_count", "bytes_from", "margin_from", "traffic_from"]

_BYTES = re.compile(r"\s*(\d+)\s*([KMGT]?B)?\s*", re.IGNORECASE)


def traffic_from(t: dict[str, Any], where: str) -> Traffic:
    """``t`` (every traffic key, None where not given) checked: one ConfigError naming ``where``'s key."""
    for key in ("concurrent_sequences", "prompt_tokens", "output_tokens"):
        if t[key] is not None and (not isinstance(t[key], int) or isinstance(t[key], bool)):
            raise ConfigError(f"{where}.{key}: expected an integer, got {t[key]!r}.")
    for key in ("requests_per_s", "seconds_per_request"):
        if t[key] is not None and (not isinstance(t[key], (int, float)) or isinstance(t[key], bool)):
            raise ConfigError(f"{where}.{key}: expected a number, got {t[key]!r}.")
    concurrent, rate, seconds = t["concurrent_sequences"], t["requests_per_s"], t["seconds_per_request"]
    if (concurrent is None) == (rate is None and seconds is None) or (concurrent is None and None in (rate, seconds)):
        raise ConfigError(
            f"{where}: give either concurrent_sequences, or requests_per_s with seconds_per_request (Little's law: "
            f"their product is the sequences in flight), got {t}."
        )
    for key in ("requests_per_s", "seconds_per_request"):
        number = t[key]
        if number is not None and not 0 < float(number) < float("inf"):
            raise ConfigError(f"{where}.{key}: expected a positive number, got {number}.")
    return Traffic(
        concurrent_sequences=bounded_count(f"{where}.concurrent_sequences", concurrent, limit="batch_size"),
        requests_per_s=None if rate is None else Fraction(repr(float(rate))),
        seconds_per_request=None if seconds is None else Fraction(repr(float(seconds))),
        prompt_tokens=bounded_count(f"{where}.prompt_tokens", t["prompt_tokens"], minimum=0, limit="max_seq_len"),
        output_tokens=bounded_count(f"{where}.output_tokens", t["output_tokens"], minimum=0, limit="max_seq_len"),
    )


def bounded_count(where: str, value: Any, minimum: int = 1, limit: str | int | None = None) -> int | None:
    """``value`` (an int or null) if it is at least ``minimum`` and within ``limit``: a key of the
    matrix limits (``estimator._limits.LIMITS``, the same bounds as the matrix) or a number."""
    if value is not None and value < minimum:
        raise ConfigError(f"{where}: expected an integer >= {minimum} or null, got {value}.")
    bound = LIMITS[limit] if isinstance(limit, str) else limit
    if value is not None and bound is not None and value > bound:
        raise ConfigError(f"{where}: {value} is over the limit of {bound:,} (docs/security.md lists the limits).")
    return value  # type: ignore[no-any-return]


def bytes_from(where: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        nbytes = value
    elif isinstance(value, str) and (match := _BYTES.fullmatch(value)):
        nbytes = int(match.group(1)) * BYTE_UNITS[(match.group(2) or "B").upper()]
    else:
        raise ConfigError(
            f"{where}: expected bytes per device, an int (4294967296) or a byte string with a binary unit "
            f"B/KB/MB/GB/TB ('4GB'), got {value!r}."
        )
    if nbytes <= 0:
        raise ConfigError(f"{where}: expected a positive byte count, got {value!r}.")
    return nbytes


def margin_from(where: str, value: Any, available: int) -> Margin:
    """A margin per chiplet: bytes (an int or a byte string with a binary unit) or a fraction of the
    chiplet's available DRAM in [0, 1); it must leave something of the chiplet."""
    if isinstance(value, float):
        if not 0 <= value < 1:
            raise ConfigError(
                f"{where}: a fraction of a chiplet must be at least 0 and below 1 (0.02 holds back 2%), got {value!r}; "
                "or give bytes per chiplet ('512MB')."
            )
        margin = Margin(fraction=Fraction(repr(value)))
    elif isinstance(value, int) and not isinstance(value, bool) and value == 0:
        margin = Margin()
    else:
        try:
            margin = Margin(nbytes=bytes_from(where, value))
        except ConfigError:
            raise ConfigError(
                f"{where}: expected a margin per chiplet, bytes (an int, or a byte string with a binary unit "
                f"B/KB/MB/GB/TB such as '512MB') or a fraction of the chiplet in [0, 1) (0.02), got {value!r}."
            ) from None
    if margin.on(available) >= available:
        raise ConfigError(
            f"{where}: {value!r} holds back {margin.on(available):,} B per chiplet, which leaves nothing of the "
            f"{available:,} B a chiplet of this device offers; lower it."
        )
    return margin
