"""``python -m rbln_build.estimate``: the estimator as a JSON-lines filter.

One request per line on stdin, one result per line on stdout (compact JSON, sorted keys), in order.
A malformed line (bad JSON, unknown field, wrong type) gets an error result and the stream goes on;
blank lines are skipped. The exit status is 0 unless reading stdin (or writing stdout) fails.
No torch, no transformers: importing this module is cheap.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, TextIO

from ..errors import EstimateError
from ..estimator import FORMS_SYNOPSIS, AllocationReport, Request, estimate

__all__ = ["FIELDS", "parse_request", "handle_line", "run", "main"]

# field -> (required, meaning) for the help text and for rejecting unknown fields
FIELDS: dict[str, tuple[bool, str]] = {
    "npu": (True, 'target NPU name or alias, e.g. "RBLN-CR03", "RBLN-CA25", "rebel100", "atom_max"'),
    "max_seq_len": (True, "tokens per sequence"),
    "batch_size": (False, "sequences per batch (default 1)"),
    "num_devices": (False, "devices (nodes) of the tensor-parallel group (default 1)"),
    "attn_impl": (False, '"eager", "flash_attn" or null (default: as optimum-rbln 0.12.0 resolves it)'),
    "kvcache_partition_len": (False, "flash-attention partition length in tokens, or null"),
    "kvcache_block_size": (False, "tokens per KV-cache block, or null"),
    "prefill_chunk_size": (False, "prefill chunk in tokens, or null (512 on RBLN-CR, 128 on RBLN-CA)"),
    "kvcache_num_blocks": (False, "0 = estimate automatically (default), or an explicit block count"),
    "memory_budget": (False, f"{FORMS_SYNOPSIS} (raw JSON value: 1 is one byte, 1.0 is 100%)"),
    "current_blocks": (False, "block count the kv_tensors sizes were measured at (1 at compile time)"),
    "alloc": (True, "{graph: {key: [[bytes per chiplet] per node]}}; every key counts except DramTensor"),
    "kv_tensors": (True, '{name: {"can_resize": bool, "sizes": [[bytes per chiplet] per node]}}'),
    "id": (False, "any JSON value, echoed back in the result"),
}
_REQUEST_FIELDS = (
    "npu",
    "max_seq_len",
    "batch_size",
    "num_devices",
    "attn_impl",
    "kvcache_partition_len",
    "kvcache_block_size",
    "prefill_chunk_size",
    "kvcache_num_blocks",
    "memory_budget",
    "current_blocks",
)

EXAMPLE_IN = (
    '{"npu": "RBLN-CA25", "batch_size": 8, "max_seq_len": 40960, "attn_impl": "flash_attn", '
    '"kvcache_partition_len": 8192, '
    '"memory_budget": 0.65, "alloc": {"prefill": {"weights": [[10737418240]]}}, '
    '"kv_tensors": {"k0": {"can_resize": true, "sizes": [[3145728]]}, '
    '"v0": {"can_resize": true, "sizes": [[3145728]]}}}'
)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def parse_request(obj: object) -> tuple[Request, AllocationReport]:
    """A decoded JSON object → (Request, AllocationReport); raises EstimateError(kind="invalid_request")."""
    if not isinstance(obj, dict):
        raise EstimateError(f"Each line must be a JSON object, got {type(obj).__name__}.", kind="invalid_request")
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise EstimateError(
            f"Unknown field(s) {', '.join(map(repr, unknown))}. Known fields: {', '.join(FIELDS)}.",
            kind="invalid_request",
        )
    missing = [name for name, (required, _) in FIELDS.items() if required and name not in obj]
    if missing:
        raise EstimateError(f"Missing required field(s): {', '.join(missing)}.", kind="invalid_request")
    current = obj.get("current_blocks", 1)
    try:
        report = AllocationReport.from_json(
            {"alloc": obj["alloc"], "kv_tensors": obj["kv_tensors"], "current_blocks": current}
        )
    except ValueError as error:
        raise EstimateError(str(error), kind="invalid_request") from None
    fields = {name: obj[name] for name in _REQUEST_FIELDS if name in obj}
    if fields.get("kvcache_num_blocks", 0) is None:
        fields["kvcache_num_blocks"] = 0  # null means unset, as 0 does
    return Request(**fields), report


def _error_result(message: str, kind: str) -> dict[str, Any]:
    return {
        "ok": False,
        "kvcache_num_blocks": None,
        "num_full_blocks": None,
        "num_min_blocks": None,
        "attention": None,
        "breakdown": None,
        "warnings": [],
        "error": message,
        "error_kind": kind,
    }


def handle_line(text: str | bytes, line: int = 0) -> dict[str, Any] | None:
    """One input line → one result object (None for a blank line). Never raises for bad content."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            result = _error_result(f"Line {line} is not valid UTF-8: {error}.", "invalid_request")
            result.update(line=line, id=None)
            return result
    if not text.strip():
        return None
    ident: object = None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:  # RecursionError: nesting deeper than the parser goes
        result = _error_result(f"Line {line} is not valid JSON: {error}.", "invalid_request")
    else:
        if isinstance(obj, dict):
            ident = obj.get("id")
        try:
            request, report = parse_request(obj)
        except EstimateError as error:
            result = _error_result(str(error), error.kind)
        else:
            result = estimate(request, report).to_json()
    result.update(line=line, id=ident)
    return result


MAX_LINE_BYTES = 4 << 20  # a request line; a compiler's report is a few kilobytes


class OverlongLine:
    """Stands for an input line longer than MAX_LINE_BYTES (its bytes were skipped, not kept)."""

    def __init__(self, size: int) -> None:
        self.size = size


def bounded_lines(source: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[bytes | OverlongLine]:
    """The lines of ``source``, each read with at most ``limit`` + 1 bytes held: a longer line is
    skipped to its end and yielded as an ``OverlongLine``, so it gets its error and the stream goes on."""
    while True:
        line = source.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or line.endswith(b"\n") and len(line) == limit + 1:
            yield line
            continue
        size = len(line)
        while not line.endswith(b"\n"):
            line = source.readline(1 << 20)
            if not line:
                break
            size += len(line)
        yield OverlongLine(size)


def run(lines: Iterable[str | bytes | OverlongLine]) -> Iterator[str]:
    """Results, one compact JSON text per non-blank input line (1-based line numbers)."""
    for number, text in enumerate(lines, start=1):
        try:
            if isinstance(text, OverlongLine):
                result: dict[str, Any] | None = _error_result(
                    f"Line {number} is {text.size:,} bytes long, over the limit of {MAX_LINE_BYTES:,}; "
                    "a request is a few kilobytes.",
                    "invalid_request",
                )
                assert result is not None
                result.update(line=number, id=None)
            else:
                result = handle_line(text, number)
            out = None if result is None else json.dumps(result, sort_keys=True, separators=(",", ":"))
        except (ValueError, RecursionError, TypeError, ArithmeticError, MemoryError) as error:
            # Whatever a line holds, it gets an answer and the stream goes on.
            failed = _error_result(
                f"Line {number} could not be answered: {type(error).__name__}: {error}.", "invalid_request"
            )
            failed.update(line=number, id=None)
            out = json.dumps(failed, sort_keys=True, separators=(",", ":"))
        if out is not None:
            yield out


def _help_epilog() -> str:
    fields = "\n".join(
        f"  {name:<22} {'(required) ' if required else ''}{meaning}" for name, (required, meaning) in FIELDS.items()
    )
    return f"""request fields (one JSON object per line):
{fields}

result fields (one JSON object per line, same order; every key always present):
  ok, kvcache_num_blocks, num_full_blocks, num_min_blocks, attention, breakdown, warnings,
  error, error_kind (null on success), line (1-based input line), id (echoed, or null).
  breakdown: budget_bytes, available_bytes, budget_per_chiplet, non_kv_bytes, kv_bytes_per_block,
  kv_fixed_bytes, max_fitting_blocks, headroom_bytes, tightest_chiplet, budget_for_floor and
  budget_for_full_pool (bytes, fraction, or null with a reason).

example:
  echo '{EXAMPLE_IN}' \\
    | python -m rbln_build.estimate
  → kvcache_num_blocks 36 (full pool 40, floor 9) with its breakdown.

A malformed line yields {{"ok": false, "error": "...", "error_kind": "invalid_request", ...}} and the
stream goes on. Exit status 0 unless stdin cannot be read or stdout is closed early (then 1)."""


def main(argv: list[str] | None = None, stdin: BinaryIO | None = None, stdout: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rbln_build.estimate",
        description="Resolve kvcache_num_blocks for JSON-lines requests (stdin → stdout), "
        "as optimum-rbln 0.12.0 does, with a breakdown of every answer.",
        epilog=_help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(argv)
    source = stdin if stdin is not None else sys.stdin.buffer
    sink = stdout if stdout is not None else sys.stdout
    try:
        for out in run(bounded_lines(source)):
            sink.write(out + "\n")
            sink.flush()
    except OSError as error:
        if isinstance(error, BrokenPipeError):
            return 1
        print(f"rbln_build.estimate: cannot read stdin: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
