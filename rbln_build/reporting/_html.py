"""Small HTML pieces the page's sections share: tables, embedded PNGs, numbers and sizes, status names."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from html import escape

__all__ = ["OUTCOME_TEXT", "SHORT_TEXT", "num", "png", "size", "table"]

OUTCOME_TEXT = {
    "full_pool": "at the full pool",
    "cut": "cut below the full pool",
    "failed": "failed",
    "unexpected_success": "unexpected success",
    "expected_failure": "expected failure",
}
SHORT_TEXT = {
    "full_pool": "full pool",
    "cut": "cut",
    "failed": "failed",
    "unexpected_success": "unexpected success",
    "expected_failure": "expected failure",
}


def num(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def size(n: int | None) -> str:
    """Bytes in the unit that reads: GiB from 1 GiB on, MiB below."""
    if n is None:
        return "-"
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.2f} MiB"


def table(header: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """Cells are HTML already (escaped by the caller); a cell starting with '<td' is used as is."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in r) + "</tr>\n" for r in rows)
    return f"<table{f' class={cls!r}' if cls else ''}><tr>{head}</tr>\n{body}</table>\n"


def png(data: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'
