"""What input rbln-build accepts: the identifier rule and the upper bounds of every count.

Shared by the layers that read user input (``build`` for configs, ``memory`` for recipes), so it
lives in the bottom layer (pure: no I/O); documented in docs/security.md. Each check returns a problem sentence (or None) and the
caller raises its own error type (ConfigError naming the key, RecipeError naming the file), so one
rule has one definition and every message names where the value came from.

Identifiers (model, device, matrix, deployment and recipe names) become file names (conf files,
recipe folders, ``artifacts/<cell id>``): letters, digits, ``_``, ``-`` and ``.``; starting with a
letter, digit or ``_``; not ending with ``.``; no ``..``; at most ``MAX_NAME_LEN`` characters. So a
name is always one path component, never a separator, a parent reference or a hidden file.

Bounds keep every allocation in proportion to real hardware, not to a number a user typed: a count
above its bound is a configuration error before anything is compiled or allocated.
"""

from __future__ import annotations

import re

__all__ = [
    "NAME_PATTERN",
    "MAX_NAME_LEN",
    "MAX_CELL_ID_BYTES",
    "LIMITS",
    "name_problem",
    "cell_id_problem",
    "count_problem",
]

NAME_PATTERN = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_-])?"
MAX_NAME_LEN = 64
# A cell id is a file name (artifacts/<cell id>, and its '.tmp-<id>-<pid>' sibling while it is
# replaced); file systems allow 255 bytes per name, so the id keeps room for that prefix and suffix.
MAX_CELL_ID_BYTES = 200
_NAME = re.compile(NAME_PATTERN, re.ASCII)

# The upper bound of each count a config, a recipe or a request may give (inclusive; each is >= 1).
LIMITS: dict[str, int] = {
    "num_devices": 64,  # tensor-parallel devices of one target (a host holds at most 16 today)
    "batch_size": 4096,
    "max_seq_len": 1 << 21,  # tokens (2,097,152)
    "kvcache_partition_len": 1 << 21,  # tokens
    "kvcache_block_size": 1 << 21,  # tokens
    "prefill_chunk_size": 1 << 21,  # tokens
    "kvcache_num_blocks": 1 << 20,  # an explicit block count (0 = resolve from the budget)
    "jobs": 1024,  # compile worker processes of one build
    "max_retries": 100,  # retries of a compile task on a cluster
    "server_cards": 64,  # `plan --cards N`, `deployment.server.cards`: cards of one server (deploy/server/_conf.py MAX_CARDS)
    # recipe geometry (config.json)
    "num_hidden_layers": 4096,
    "num_attention_heads": 4096,
    "num_key_value_heads": 4096,
    "hidden_size": 1 << 20,
    "intermediate_size": 1 << 22,
    "head_dim": 1 << 16,
    "vocab_size": 1 << 24,
    "sliding_window": 1 << 21,
    "sliding_window_pattern": 4096,
}


def name_problem(value: object) -> str | None:
    """Why ``value`` is not an identifier, or None when it is one."""
    if not isinstance(value, str):
        return f"a name must be a string, got {type(value).__name__} {value!r}"
    if len(value) > MAX_NAME_LEN:
        return f"a name has at most {MAX_NAME_LEN} characters, got {len(value)}"
    if _NAME.fullmatch(value) is None or ".." in value:
        return (
            f"{value!r} is not a valid name: use letters, digits, '_', '-' and '.', starting with a letter, "
            "digit or '_', not ending with '.', without '..' or path separators"
        )
    return None


def cell_id_problem(cell_id: str) -> str | None:
    """Why a composed cell id cannot be a file name, or None."""
    size = len(cell_id.encode("utf-8"))
    if size > MAX_CELL_ID_BYTES:
        return (
            f"the cell id {cell_id[:60]!r}... is {size} bytes long, over the limit of {MAX_CELL_ID_BYTES} "
            "(it names a folder); use shorter model or device names"
        )
    if _NAME.fullmatch(cell_id) is None or ".." in cell_id:
        return f"the cell id {cell_id!r} is not a valid name (letters, digits, '_', '-', '.'; no '..')"
    return None


def count_problem(key: str, value: object, zero_ok: bool = False) -> str | None:
    """Why ``value`` is not a valid ``key`` count (a positive int up to ``LIMITS[key]``), or None."""
    low = 0 if zero_ok else 1
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected an integer, got {value!r}"
    limit = LIMITS[key]
    if value < low:
        return f"expected {'0 (auto) or ' if zero_ok else ''}a positive integer, got {value}"
    if value > limit:
        return f"{value} is over the limit of {limit:,} (docs/security.md lists the limits)"
    return None
