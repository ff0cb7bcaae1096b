"""A released cell's files taken from the remote cache, for a build dir that holds none (the merge's).

``shard=merge/N`` writes the manifest from the shards' records and downloads no program, so its build
dir has no ``artifacts/<cell id>`` links. ``release`` from it reads each cell's artifact entry from
``cache.remote`` instead (the URL and credential options the build used: ``cache.*`` overrides and the
project's config). The entry is fetched and verified exactly as a build fetches it (``RemoteStore``,
read-only: the blob's size against its pointer before a byte is fetched, the tar's sha256 against its
name, the unpacked entry's content hash against the pointer's, its programs as data), into a temporary
store that holds one entry at a time; the release then checks it again against the manifest's
``artifact.content_hash`` (``_bundle``), so the cell folder is byte for byte the one a full build dir
releases. A cell whose entry is not on the remote (or fails a check) is a ``BuildError`` naming the
cell and its artifact key: nothing is published.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import BuildError, CacheError
from ..pipeline import artifact_key_of
from ..store import Entry, RemoteOptions, RemoteStore, is_key

__all__ = ["RemoteOpener", "RemoteSource"]


class RemoteSource:
    """Artifact entries of the remote cache ``url`` (with its ``options``, as a build has them), fetched
    one at a time into ``root`` (a temporary folder)."""

    def __init__(self, url: str, options: RemoteOptions, root: Path) -> None:
        self.warnings: list[str] = []
        self.url = url
        options = replace(options, mode="read")  # a release never writes to the cache
        self._store = RemoteStore(root, url, self.warnings.append, True, options=options)
        self._checked = False
        self.fetched = 0  # entries taken from the remote
        self.cells: list[str] = []  # the cells they are, in order
        self.fetched_bytes = 0  # their files' bytes

    def artifact_key(self, cid: str, record: dict[str, Any]) -> str:
        ckey, blocks = record.get("compile_key"), record.get("kvcache_num_blocks")
        npu = (record.get("inputs") or {}).get("npu") if isinstance(record.get("inputs"), dict) else None
        if not (isinstance(ckey, str) and is_key(ckey) and isinstance(blocks, int) and isinstance(npu, str)):
            raise BuildError(
                f"cell {cid!r}: its manifest record has no compile key, block count or npu to find its artifact "
                f"on {self.url} by; rebuild it (rbln-build)."
            )
        return artifact_key_of(ckey, npu, blocks)

    def fetch(self, cid: str, record: dict[str, Any]) -> Entry:
        """The verified artifact entry of cell ``cid`` (``drop`` it when copied), or BuildError."""
        key = self.artifact_key(cid, record)
        if not self._checked:
            why = self._store.check()
            if why is not None:
                raise BuildError(
                    f"cache.remote: {self.url} cannot be read ({why}); the build dir holds no programs (a merge's), "
                    "so the release needs it. Check the URL and the credentials in the environment "
                    "(cache.key_env/secret_env), then release again."
                )
            self._checked = True
        before = len(self.warnings)
        try:
            entry = self._store.lookup("artifacts", key)
        except CacheError as exc:  # an error that will not pass (auth, a missing bucket)
            raise BuildError(f"cell {cid!r}: artifact {key} could not be read from {self.url}: {exc}") from None
        if entry is None:
            why = self.warnings[before].split("; ")[0] if len(self.warnings) > before else "no such entry"
            raise BuildError(
                f"cell {cid!r}: artifact {key} is not usable on {self.url} ({why}); nothing was published. "
                "Run the shard that built it again (or a build of the matrix with the remote), then release again."
            )
        self.fetched += 1
        self.cells.append(cid)
        self.fetched_bytes += sum(p.stat().st_size for p in entry.files.rglob("*") if p.is_file())
        return entry

    @staticmethod
    def drop(entry: Entry) -> None:
        """Remove a fetched entry once its files are copied: one entry on the local disk at a time."""
        shutil.rmtree(entry.path, ignore_errors=True)


# (cache.* overrides, --project) -> (cache.remote, its RemoteOptions) of the project's config with
# them, or None when it sets no remote
RemoteOpener = Callable[[list[str], str | None], "tuple[str, RemoteOptions] | None"]
