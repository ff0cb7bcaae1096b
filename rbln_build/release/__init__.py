"""Releases: a built matrix's cells as self-contained, verifiable folders (docs/releasing.md).

_bundle      select cells of a manifest, copy and verify their artifacts, write release.json
_remote_source  a cell's artifact from the remote cache, for a merge's build dir (no programs in it)
_card        each cell's README.md (model card: budget, blocks, serve command, load lines)
_provenance  every input the manifest records, rbln-build's version, the project's git commit
_git        a work tree's commit and cleanliness (provenance, reproduce's check, --version)
_format      release.json's names, rendering and self-hash (shared by the writer and verify)
_dest        publish to a folder or an fsspec URL: all at once, release.json last, names immutable
_verify      check a release where a consumer has it (no build directory, no torch)
_lone        check a released cell that travels alone (a Hub repo) against its own rbln-build-files.json
_sign        detached Ed25519 signatures of release.json (the `sign` extra)
_cli         the ``release`` and ``verify`` commands: arguments and messages

Only the consumer's side and the two commands' entry points are re-exported here: importing this package must stay light (verify needs
neither the store nor the pipeline). The writer's side is ``rbln_build.release._bundle`` / ``_dest``.
"""

from ._cli import release_main, verify_main
from ._format import CELL_FILES, FORMAT, RELEASE_FILE, SELF_HASH_KEY, SIGNATURE_FILE, self_hash
from ._git import checkout_commit, dirty_files, git_state
from ._lone import check_released_cell, verify_cell, verify_location
from ._verify import Verdict, verify_release

__all__ = [
    "check_released_cell",
    "checkout_commit",
    "dirty_files",
    "git_state",
    "CELL_FILES",
    "FORMAT",
    "RELEASE_FILE",
    "SELF_HASH_KEY",
    "self_hash",
    "SIGNATURE_FILE",
    "Verdict",
    "release_main",
    "verify_cell",
    "verify_location",
    "verify_main",
    "verify_release",
]
