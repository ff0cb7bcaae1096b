"""Releases: a built matrix's cells as self-contained, verifiable folders (docs/releasing.md).

_bundle      select cells of a manifest, copy and verify their artifacts, write release.json
_card        each cell's README.md (model card: budget, blocks, serve command, load lines)
_provenance  every input the manifest records, rbln-build's version, the project's git commit
_format      release.json's names, rendering and self-hash (shared by the writer and verify)
_dest        publish to a folder or an fsspec URL: all at once, release.json last, names immutable
_verify      check a release where a consumer has it (no build directory, no torch)
_sign        detached Ed25519 signatures of release.json (the `sign` extra)

Nothing is imported here eagerly: ``verify`` must stay light.
"""

__all__: list[str] = []
