"""``rbln-build release NAME`` and ``rbln-build verify RELEASE``: arguments and messages; the work is
in rbln_build.release. A user's mistake raises UserError (the boundary in _main: exit 2); a cell that
fails its check or an upload that fails is reported here with exit 1."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BuildError, UsageParser, UserError

if TYPE_CHECKING:  # the store and the pipeline load only when a release needs the remote cache
    from ._remote_source import RemoteOpener

__all__ = ["release_main", "verify_main"]

RELEASE_EPILOG = """\
The release lands in <to>/<NAME>/ (default --to: <build dir>/releases): one folder per cell with real
files and a README.md model card, and release.json (every file's sha256 and size, every cell's
manifest record, provenance). Releasing the same content again under NAME is a no-op; other content
under an existing NAME is refused. A merge's build dir (shard=merge/N) holds no programs: each cell is
then copied from the remote cache (cache.remote=URL and its options, as the build was given them, or the
project's config), verified by its content hash. Exit status: 0 published or unchanged; 1 an artifact does not match
its manifest record or is not on the remote cache, or the destination URL could not be read or written; 2 a usage error or a name that holds another release.
"""

VERIFY_EPILOG = """\
Exit status: 0 every file matches release.json (and its signature, with --key); 1 a file is missing,
extra, changed or a symlink, or release.json or its signature does not check (each named); 2 a usage
error. Needs neither the build directory nor torch.
"""


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _release_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog="rbln-build release",
        description="Release built cells as self-contained folders with release.json (docs/releasing.md).",
        epilog=RELEASE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "name", metavar="NAME", help="the release's name (letters, digits, . _ + -); immutable once published"
    )
    p.add_argument("--to", metavar="DIR|URL", default=None, help="parent folder or fsspec URL (file://, s3://)")
    p.add_argument("--build-dir", metavar="DIR", default=None, help="the build directory (default: <project>/build)")
    p.add_argument("--cells", metavar="GLOB", action="append", default=[], help="cell ids to release (repeatable)")
    p.add_argument("--deployment", metavar="NAME", default=None, help="release the cells of this built deployment")
    p.add_argument("--allow-failed", action="store_true", help="release the built cells even if selected cells failed")
    p.add_argument("--sign", metavar="KEYFILE", default=None, help="Ed25519 private key (PEM): write release.json.sig")
    p.add_argument("--project", metavar="DIR", default=None, help="the project root (holding rbln-build.yaml)")
    p.add_argument(
        "--layout",
        choices=("folder", "hub"),
        default="folder",
        help="hub: every cell folder is a Hub model repo (card front matter, its own integrity file); "
        "prints the huggingface-cli upload command of each (default: folder)",
    )
    p.add_argument(
        "--hub-org",
        metavar="ORG",
        default=None,
        help="with --layout hub: the repos are ORG/<cell id> (named in the cards)",
    )
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.add_argument(
        "overrides",
        nargs="*",
        default=[],  # not "required" in argparse's message when NAME is missing
        metavar="cache.KEY=VALUE",
        help="the remote cache a merge's build dir (shard=merge/N, no programs) takes its cells from, as the "
        "build was given it: cache.remote=URL and its credential options (default: the project's config)",
    )
    return p


_HUB_ORG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def release_main(argv: list[str], remote_for: RemoteOpener | None = None) -> int:
    """``remote_for(overrides, project)``: the remote cache of the project's config with ``cache.*``
    overrides (composed by the caller, only when a selected cell has no link in the build dir)."""
    args = _release_parser().parse_intermixed_args(argv)
    from ..config import find_project
    from ._bundle import Selection, check_name, read_manifest, select_cells, stage_release
    from ._dest import is_url, local_staging, publish
    from ._format import SIGNATURE_FILE, redact

    if "=" in args.name:  # `release build_dir=b`: an override where the name belongs
        raise UserError(
            f"{args.name[:100]!r} stands where the release's name belongs; give the name first "
            "(rbln-build release NAME), the build directory as --build-dir DIR and the remote cache as "
            "cache.KEY=VALUE after the name."
        )
    check_name(args.name, "release name")
    if args.hub_org is not None and (args.layout != "hub" or not _HUB_ORG.fullmatch(args.hub_org)):
        raise UserError(
            f"--hub-org {args.hub_org[:100]!r}: give a Hub user or organization name (letters, digits, . _ -) "
            "together with --layout hub."
        )
    if args.to is not None and not args.to.strip():  # `--to "$DEST"` with DEST unset: not the current folder
        raise UserError("--to '': empty; give the parent folder or URL of the release (or leave --to out).")
    project = find_project(args.project)
    build_dir = Path(args.build_dir) if args.build_dir else project.root / "build"
    to = args.to if args.to is not None else str(build_dir / "releases")
    selection = Selection(tuple(args.cells), args.deployment, args.allow_failed)
    for override in args.overrides:
        if not override.startswith("cache.") or "=" not in override:
            raise UserError(
                f"{override[:100]!r}: release takes only cache.KEY=VALUE overrides (the remote cache a merge's "
                "cells are on, e.g. cache.remote=s3://bucket/cache); see rbln-build release --help."
            )
    # the manifest and the selection are checked before anything is created (a usage error writes
    # nothing); stage_release reads the manifest again under the build directory's lock
    chosen, _ = select_cells(read_manifest(build_dir)[1], selection, str(build_dir / "manifest.json"))
    linkless = [c for c in chosen if not (build_dir / "artifacts" / c).is_symlink()]
    spec: tuple[str, Any] | None = None
    if linkless and len(linkless) < len(chosen) and not any(o.startswith("cache.remote=") for o in args.overrides):
        # a build dir that lost some links (not a merge's, which has none): never filled in silently
        shown = ", ".join(linkless[:5]) + (f" and {len(linkless) - 5} more" if len(linkless) > 5 else "")
        raise UserError(
            f"{_count(len(linkless), 'selected cell')} of {build_dir} ha{'s' if len(linkless) == 1 else 've'} lost "
            f"{'its' if len(linkless) == 1 else 'their'} artifact link ({shown}) while {len(chosen) - len(linkless)} "
            "have one: run rbln-build (a build of the matrix) to restore the links, or take those cells from the "
            "remote cache on purpose: rbln-build release NAME cache.remote=URL [cache.key_env=... ...]."
        )
    if linkless:  # a merge's build dir (shard=merge/N): the programs are on the remote cache only
        spec = remote_for(args.overrides, args.project) if remote_for is not None else None
        if spec is None:
            raise UserError(
                f"{_count(len(linkless), 'selected cell')} of {build_dir} ha{'s' if len(linkless) == 1 else 've'} no "
                f"artifact link (e.g. {linkless[0]}): a merge's build dir (shard=merge/N) holds no programs. Give the "
                "remote cache they are on, as the build did: rbln-build release NAME cache.remote=URL "
                "[cache.key_env=... ...], or run rbln-build (a build of the matrix) to make the links."
            )
    if args.sign:  # the key too: a bad one is refused before any folder is made
        from ._sign import sign

        sign(b"", Path(args.sign))
    if is_url(to):
        parent = Path(tempfile.mkdtemp(prefix="rbln-release-"))
        staging = parent / args.name
        exclude: tuple[Path, ...] = (build_dir,)
    else:
        parent = Path(to)
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            where = f"--to {to}" if args.to is not None else f"{to} (the default --to, under the build directory)"
            raise UserError(
                f"{where}: cannot create the folder ({exc.strerror or exc}); choose a writable one with --to DIR."
            ) from None
        staging = local_staging(parent, args.name)
        exclude = (build_dir, parent)
    fetch_root, remote = None, None
    if spec is not None:
        from ._remote_source import RemoteSource

        fetch_root = Path(tempfile.mkdtemp(prefix="rbln-release-cache-"))
        remote = RemoteSource(spec[0], spec[1], fetch_root)
    lock = None
    if (build_dir / "manifest.json").is_file():  # no build rewrites links and records while cells are copied
        from ..store import acquire_build_lock

        try:
            lock = acquire_build_lock(build_dir, "rbln-build release")
        except OSError:
            lock = None  # a build directory we cannot write (a read-only copy): nothing can build there either
    try:
        try:
            staged = stage_release(
                build_dir, args.name, selection, staging, project.root, exclude, args.hub_org, remote
            )
        finally:
            if lock is not None:
                lock.release()
        if args.sign:
            from ._sign import sign

            (staging / SIGNATURE_FILE).write_bytes(sign(staged.data, Path(args.sign)))
        location, outcome = publish(staging, to, args.name)
    except UserError:
        raise
    except BuildError as exc:  # a cell that fails its check, an upload that failed: nothing published
        print(f"rbln-build release: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the destination (read-only, a special file) or a file it reads: one line
        line = _os_error(exc, args.name, to if is_url(to) else str(parent), args.to is not None)
        print(f"rbln-build release: {line}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(parent if is_url(to) else staging, ignore_errors=True)
        if fetch_root is not None:
            shutil.rmtree(fetch_root, ignore_errors=True)
    size = sum(f["size"] for f in staged.files.values())
    if remote is not None and remote.cells:  # on stderr too (--json): which cells did not come from this build dir
        shown = ", ".join(remote.cells[:20]) + (f" and {len(remote.cells) - 20} more" if len(remote.cells) > 20 else "")
        print(
            f"rbln-build release: {_count(len(remote.cells), 'cell')} without an artifact link in {build_dir} "
            f"came from the remote cache {redact(remote.url)}: {shown}",
            file=sys.stderr,
        )
    if args.json:
        out = {
            "name": args.name,
            "location": location,
            "outcome": outcome,
            "cells": staged.cells,
            "not_released": staged.not_released,
            "files": len(staged.files),
            "bytes": size,
            "signed": bool(args.sign),
            "layout": args.layout,
            "from_remote": remote.fetched if remote is not None else 0,
        }
        sys.stdout.write(json.dumps(out, sort_keys=True, indent=2) + "\n")
        return 0
    what = f"{_count(len(staged.cells), 'cell')}, {_count(len(staged.files), 'file')} ({size:,} bytes)"
    if outcome == "unchanged":
        print(f"release {args.name}: unchanged, {location} already holds this release ({what}); nothing written.")
    else:
        signed = f", signed ({SIGNATURE_FILE})" if args.sign else ""
        print(f"release {args.name}: {what}{signed} -> {location}")
    if remote is not None and remote.fetched:
        print(
            f"  {_count(remote.fetched, 'cell')} taken from the remote cache {redact(remote.url)} "
            f"({remote.fetched_bytes:,} bytes, each verified by its content hash)"
        )
    for cid, status in sorted(staged.not_released.items()):
        print(f"  not released: {cid} ({status})")
    print(f"check it where it is used: rbln-build verify {redact(location)}")
    if args.layout == "hub":
        org = args.hub_org or "<org>"
        print("each cell is a Hub model repo (README.md front matter, its own rbln-build-files.json); upload with:")
        for cid in staged.cells:
            print(f"  huggingface-cli upload {org}/{cid} {redact(location).rstrip('/')}/{cid} .")
    return 0


def _os_error(exc: OSError, name: str, to: str, given: bool) -> str:
    """An OSError of a release as one line: under the destination, a UserError (choose another
    --to, exit 2); elsewhere (the build's files), the line to print (exit 1). Nothing was published."""
    from ._format import redact

    what = exc.strerror or type(exc).__name__
    path = str(exc.filename) if exc.filename is not None else None
    where = f"--to {redact(to)}" if given else f"{to} (the default --to, under the build directory)"
    if path is None or os.path.abspath(path).startswith(os.path.abspath(to)):
        raise UserError(
            f"release {name}: cannot write under {where}: {path or ''}{': ' if path else ''}{what}; nothing was "
            "published. Choose a writable folder with --to DIR."
        ) from None
    return f"release {name}: {path}: {what}; nothing was published."


def _verify_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog="rbln-build verify",
        description="Check a release folder or URL against its release.json, or a lone cell folder (a Hub repo) "
        "against its own rbln-build-files.json, without the build directory.",
        epilog=VERIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "release", metavar="RELEASE", help="the release folder, or its URL (file://, s3://), or one cell's folder"
    )
    p.add_argument("--key", metavar="PUBFILE", default=None, help="Ed25519 public key (PEM): require a valid signature")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    return p


def verify_main(argv: list[str]) -> int:
    args = _verify_parser().parse_args(argv)
    from ._format import RELEASE_FILE, redact
    from ._lone import verify_location

    verdict = verify_location(args.release, Path(args.key) if args.key else None)
    where = redact(verdict.location).rstrip("/")
    if args.json:
        out = {
            "release": where,
            "name": verdict.name,
            "ok": verdict.ok,
            "cells": verdict.cells,
            "files": verdict.files,
            "bytes": verdict.total_bytes,
            "signature": verdict.signature,
            "problems": [{"file": f, "problem": p} for f, p in verdict.problems],
        }
        sys.stdout.write(json.dumps(out, sort_keys=True, indent=2) + "\n")
        return 0 if verdict.ok else 1
    for rel, problem in verdict.problems:
        print(f"rbln-build verify: {where}/{rel}: {problem}", file=sys.stderr)
    if not verdict.ok:
        print(
            f"rbln-build verify: {where}: FAILED, {len(verdict.problems)} problem(s); do not use this "
            f"{'release' if verdict.checked_against == RELEASE_FILE else 'cell'}.",
            file=sys.stderr,
        )
        return 1
    signature = {
        "ok": f"signature ok ({args.key})",
        "unchecked": "signed, signature not checked (pass --key PUBFILE)",
        "absent": "not signed",
    }[verdict.signature]
    if verdict.checked_against != RELEASE_FILE:  # a lone cell (a Hub repo): its own integrity file
        print(
            f"cell {Path(verdict.location).name} (release {verdict.name}): {_count(verdict.files, 'file')} "
            f"({verdict.total_bytes:,} bytes) match {verdict.checked_against}."
        )
        return 0
    print(
        f"release {verdict.name}: {_count(verdict.cells, 'cell')}, {_count(verdict.files, 'file')} "
        f"({verdict.total_bytes:,} bytes) "
        f"match release.json; {signature}."
    )
    return 0
