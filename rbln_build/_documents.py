"""Bounded reads of the documents a user hands rbln-build (manifests, records, configs, recipes).

Every JSON or YAML file that comes from a user's path is read through here, so that no document
can make rbln-build read, allocate or recurse without bound:

* ``read_document``: the bytes of a regular file, at most ``limit`` of them. A folder, a device
  (``/dev/zero``), a FIFO, a symlink loop or a path the OS refuses is an error naming the file, never
  a hang or an unbounded read.
* ``parse_json`` / ``load_json``: JSON nested at most ``MAX_DEPTH`` levels (deeper input is refused
  before anything recurses over it).
* ``parse_yaml`` / ``yaml_problem``: YAML with aliases bounded: the document's size with every alias
  expanded is counted on the composed node graph (shared nodes counted once per use, memoised, so
  the count itself is linear) and refused above ``MAX_YAML_NODES``, before any object is built.
  Hydra's config files are checked with ``yaml_problem`` before Hydra composes them.
* ``hash_stream`` / ``sha256_file``: a file of any size (weights, artifacts) fed to a hash in 1 MiB
  reads, never held whole: the one chunked hashing loop of every layer.

Errors are ``InputError`` by default; a caller passes its own class (``ConfigError``,
``RecipeError``) when the document is a config or a recipe. Each names the file, what it got and
what to do (docs/security.md, "Limits").
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import IO, Any, Protocol

from .errors import InputError, RblnBuildError

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_CONFIG_BYTES",
    "MAX_DEPTH",
    "MAX_YAML_NODES",
    "absent",
    "read_file",
    "read_document",
    "parse_json",
    "load_json",
    "parse_yaml",
    "yaml_problem",
    "depth_problem",
    "hash_stream",
    "sha256_file",
]

MAX_DOCUMENT_BYTES = 64 << 20  # a manifest, a result record, a JSON document a command reads
MAX_CONFIG_BYTES = 4 << 20  # a config file, recipe.yaml, config.json, rbln-build.yaml
MAX_DEPTH = 64  # nesting levels of a JSON or YAML document (ours use at most 6)
MAX_YAML_NODES = 100_000  # a YAML document's nodes with every alias expanded

ErrorType = type[RblnBuildError]
CHUNK_BYTES = 1 << 20  # one read of a file being hashed


class _Hash(Protocol):
    def update(self, data: bytes, /) -> None: ...


def hash_stream(h: _Hash, f: IO[bytes]) -> int:
    """Feed every byte left in the open binary file ``f`` to the hash ``h``, ``CHUNK_BYTES`` at a
    time; the number of bytes fed."""
    size = 0
    for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
        h.update(chunk)
        size += len(chunk)
    return size


def sha256_file(path: Path | str) -> str:
    """The sha256 (hex) of the file at ``path``, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        hash_stream(h, f)
    return h.hexdigest()


def absent(path: Path | str, *, error: ErrorType = InputError, hint: str = "") -> bool:
    """Whether nothing is at ``path`` (not even a dangling link). A path the OS refuses to look at
    (a name too long, a file where a folder belongs, a loop) is ``error`` naming it, not a traceback:
    ``Path.exists`` raises for those."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except (OSError, ValueError) as exc:
        tail = f"; {hint}" if hint else ""
        raise error(f"{str(path)[:300]}: cannot use it ({getattr(exc, 'strerror', None) or exc}){tail}.") from None
    return False


def read_file(path: Path | str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; an OSError otherwise
    (``FileNotFoundError`` when nothing is there), for readers that take any unreadable file alike:
    the cache's entries, records and indexes, where a bad one is a miss. A FIFO or a device (a link
    to ``/dev/zero``) is refused without waiting on it or reading it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a folder, device, pipe or socket)", str(path))
        data = None if st.st_size > limit else _read_capped(fd, limit)
        if data is None:
            raise OSError(errno.EFBIG, f"over the size limit of {limit:,} bytes", str(path))
        return data
    finally:
        os.close(fd)


def _read_capped(fd: int, limit: int) -> bytes | None:
    """Everything ``fd`` holds, or None when that is more than ``limit`` bytes (read at most one more)."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return None if size > limit else b"".join(chunks)


def read_document(
    path: Path | str, *, limit: int = MAX_DOCUMENT_BYTES, error: ErrorType = InputError, hint: str = ""
) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; else ``error`` naming it."""
    tail = f"; {hint}" if hint else ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror or exc}){tail}.") from None
    except ValueError as exc:  # an embedded NUL byte
        raise error(f"{path}: not a usable path ({exc}){tail}.") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{path}: is a folder, not a file{tail}.")
        if not stat.S_ISREG(mode):
            raise error(f"{path}: is not a regular file (a device, pipe or socket){tail}.")
        data = _read_capped(fd, limit)
        if data is None:
            raise error(f"{path}: over the size limit of {limit:,} bytes for this document{tail}.")
        return data
    except OSError as exc:
        raise error(f"{path}: cannot read it ({exc.strerror or exc}){tail}.") from None
    finally:
        os.close(fd)


def depth_problem(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Why ``value`` (parsed JSON) nests too deeply, or None. Iterative: it never recurses."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:  # only containers are pushed: a 10,000-cell manifest's scalars cost a type check each
        item, depth = stack.pop()
        if depth > limit:
            return f"nested deeper than {limit} levels"
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return None


def parse_json(data: bytes | str, where: str, *, error: ErrorType = InputError, hint: str = "") -> Any:
    """``data`` as JSON, nested at most MAX_DEPTH levels; else ``error`` naming ``where``."""
    tail = f"; {hint}" if hint else ""
    try:
        value = json.loads(data)
    except RecursionError:
        raise error(f"{where}: nested deeper than {MAX_DEPTH} levels{tail}.") from None
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, an integer of over 4,300 digits
        raise error(f"{where}: not valid JSON ({str(exc)[:200]}){tail}.") from None
    problem = depth_problem(value)
    if problem is not None:
        raise error(f"{where}: {problem}{tail}.")
    return value


def load_json(
    path: Path | str, *, limit: int = MAX_DOCUMENT_BYTES, error: ErrorType = InputError, hint: str = ""
) -> Any:
    """The JSON document at ``path``, read with ``read_document`` and parsed with ``parse_json``."""
    return parse_json(read_document(path, limit=limit, error=error, hint=hint), str(path), error=error, hint=hint)


def _expanded_nodes(root: Any) -> tuple[int, int]:
    """(nodes with every alias expanded, nesting depth) of a composed YAML node graph; stops counting
    once either bound is passed. Memoised on node identity, so a billion-laughs graph costs its
    size on disk, not its expansion; an alias to an enclosing node counts as unbounded."""
    from yaml.nodes import MappingNode, SequenceNode

    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            sizes[key], depths[key] = 1, 0
            continue
        if done:
            active.discard(key)
            sizes[key] = min(MAX_YAML_NODES + 1, 1 + sum(sizes[id(c)] for c in children))
            depths[key] = min(MAX_DEPTH + 1, 1 + max((depths[id(c)] for c in children), default=0))
            continue
        if key in sizes:
            continue
        if key in active:  # an alias to an enclosing node: infinite when expanded
            return MAX_YAML_NODES + 1, 0
        active.add(key)
        stack.append((node, True))
        if len(active) > MAX_DEPTH + 1:
            return 0, MAX_DEPTH + 1
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes.get(id(root), 1), depths.get(id(root), 0)


def _compose(text: str | bytes, loader_class: Any = None) -> tuple[Any, Any]:
    import yaml

    loader = (loader_class or yaml.SafeLoader)(text)
    return loader, loader.get_single_node()


def yaml_problem(data: str | bytes) -> str | None:
    """Why the YAML ``data`` may not be loaded (invalid, too deep, or too large once its aliases are
    expanded), or None. Nothing is constructed."""
    import yaml

    loader = None
    try:
        loader, node = _compose(data)
    except RecursionError:
        return f"nested deeper than {MAX_DEPTH} levels"
    except (yaml.YAMLError, ValueError) as exc:
        return f"not valid YAML ({str(exc)[:200]})"
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        return None
    size, depth = _expanded_nodes(node)
    if depth > MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} levels"
    if size > MAX_YAML_NODES:
        return (
            f"over {MAX_YAML_NODES:,} values once its aliases (*name) are expanded; "
            "write the values out or use fewer nested aliases"
        )
    return None


def parse_yaml(data: bytes | str, where: str, *, error: ErrorType = InputError, hint: str = "") -> Any:
    """``data`` as YAML (safe types only), with aliases and nesting bounded; else ``error``."""
    import yaml

    tail = f"; {hint}" if hint else ""
    problem = yaml_problem(data)
    if problem is not None:
        raise error(f"{where}: {problem}{tail}.")
    try:
        return yaml.safe_load(data)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise error(f"{where}: not valid YAML ({str(exc)[:200]}){tail}.") from None
