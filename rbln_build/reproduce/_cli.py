"""``rbln-build reproduce RELEASE``: arguments, order of work and messages (docs/releasing.md)."""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..errors import UsageParser, UserError

__all__ = ["main"]

EPILOG = """\
Run it in a checkout of the project at the commit the release's provenance names. The release is
verified first; its cells are then rebuilt from this checkout into a fresh build directory (nothing
cached is reused) and staged as a release again, and every file and every cell record is compared
with release.json. A toolchain that differs from the one the cells record is said first.
Exit status: 0 every file and record rebuilt identical; 1 something differs (the first difference
named: a JSON key path, an archive member, a tensor, a byte offset), the release does not verify,
or the rebuild failed; 2 a usage error, or a checkout that is not the release's commit or has
uncommitted changes (unless --allow-other-commit / --allow-dirty).
"""


def _parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog="rbln-build reproduce",
        description="Rebuild a release's cells from this checkout and compare every file with release.json.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("release", metavar="RELEASE", help="the release folder, or its URL (file://, s3://)")
    p.add_argument(
        "overrides", metavar="OVERRIDE", nargs="*", default=[], help="passed to the build (jobs=1, executor=ray)"
    )
    p.add_argument("--cells", metavar="GLOB", action="append", default=[], help="only these released cells")
    p.add_argument("--project", metavar="DIR", default=None, help="the project checkout (default: found from here)")
    p.add_argument("--build-dir", metavar="DIR", default=None, help="build here (new or empty; kept)")
    p.add_argument("--keep", action="store_true", help="keep the rebuild's build directory when it matches")
    p.add_argument("--allow-dirty", action="store_true", help="rebuild from uncommitted changes (said in the verdict)")
    p.add_argument(
        "--allow-other-commit", action="store_true", help="rebuild from another commit than the release's (said)"
    )
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    return p


def _fresh(build_dir: str | None) -> tuple[Path, bool]:
    if build_dir is None:
        return Path(tempfile.mkdtemp(prefix="rbln-reproduce-")) / "build", True
    path = Path(build_dir).absolute()  # the build runs in the project's folder
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserError(f"--build-dir {build_dir}: not empty; reproduce builds into a fresh directory, give a new one.")
    return path, False


def _select(body: dict[str, Any], globs: list[str]) -> dict[str, dict[str, Any]]:
    cells = body.get("cells") or {}
    names = sorted(cells)
    for glob in globs:
        if not any(fnmatch.fnmatchcase(c, glob) for c in names):
            raise UserError(
                f"--cells {glob!r} matches no cell of the release (its cells are e.g. {', '.join(names[:3])})."
            )
    chosen = [c for c in names if not globs or any(fnmatch.fnmatchcase(c, g) for g in globs)]
    return {c: (cells[c] or {}).get("record") or {} for c in chosen}


def _toolchains_here(records: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    from ..backends import get_backend

    out = {}
    for backend in sorted({str((r.get("inputs") or {}).get("backend")) for r in records.values()}):
        try:
            out[backend] = get_backend(backend).toolchain()
        except Exception as exc:  # a plug-in backend that does not load here: the rebuild says so
            out[backend] = {"backend": f"unavailable ({type(exc).__name__})"}
    return out


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    import rbln_build

    from ..config import find_project
    from ..release import RELEASE_FILE, verify_release
    from ..release._format import redact
    from ..release._verify import open_release
    from ._checkout import check_sources, toolchain_differences

    where = redact(args.release).rstrip("/")
    verdict = verify_release(args.release)
    if not verdict.ok:
        rel, problem = verdict.problems[0]
        more = (
            f" (and {len(verdict.problems) - 1} more problem(s): rbln-build verify {where})"
            if len(verdict.problems) > 1
            else ""
        )
        print(f"rbln-build reproduce: {where}/{rel}: {problem}; the release does not verify{more}.", file=sys.stderr)
        return 1
    release = open_release(args.release)
    body = json.loads(b"".join(release.chunks(RELEASE_FILE)))
    deployment = (body.get("selection") or {}).get("deployment") if isinstance(body.get("selection"), dict) else None
    if deployment:
        raise UserError(
            f"{where}: a release of deployment {deployment!r}; reproduce rebuilds matrix cells and does not "
            "remake a deployment's co-location yet. Rebuild it with rbln-build deployment=NAME and compare with "
            "rbln-build diff."
        )
    records = _select(body, args.cells)
    project = find_project(args.project)
    build_dir, temporary = _fresh(args.build_dir)
    local = getattr(release, "root", None)
    exclude = tuple(p for p in (build_dir, None if local is None else Path(local)) if p is not None)
    sources = check_sources(
        body.get("provenance") or {}, project.root, exclude, args.allow_dirty, args.allow_other_commit
    )
    for line in sources.allowed:
        print(f"rbln-build reproduce: allowed: {line}.", file=sys.stderr)
    toolchain = toolchain_differences(
        records, _toolchains_here(records), rbln_build.__version__, (body.get("provenance") or {}).get("rbln_build")
    )
    if toolchain:
        print(
            f"rbln-build reproduce: the toolchain differs from the release's: {'; '.join(toolchain)} "
            "(the likely cause of any difference below).",
            file=sys.stderr,
        )
    return _rebuild_and_compare(
        args, where, release, body, records, project.root, build_dir, temporary, sources, toolchain
    )


def _rebuild_and_compare(
    args: Any, where: str, release: Any, body: dict[str, Any], records: dict[str, dict[str, Any]], root: Path,
    build_dir: Path, temporary: bool, sources: Any, toolchain: list[str],
) -> int:  # fmt: skip
    from ..release._bundle import Selection, stage_release
    from ._compare import compare_release
    from ._rebuild import rebuild

    done = rebuild(root, records, build_dir, list(args.overrides))
    keep = args.keep or not temporary
    if done.returncode != 0 or not (build_dir / "manifest.json").is_file():
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        print(
            f"rbln-build reproduce: {where}: the rebuild failed (exit {done.returncode}); build directory kept: "
            f"{build_dir}\n{tail}",
            file=sys.stderr,
        )
        return 1
    staging = build_dir / "releases" / str(body.get("name"))
    staged = stage_release(build_dir, str(body.get("name")), Selection(tuple(records)), staging, root, (build_dir,))
    differences = compare_release(release, body, list(records), staging, json.loads(staged.data))
    files = [rel for rel in body.get("files") or {} if rel.split("/", 1)[0] in records]
    size = sum(int(body["files"][rel].get("size") or 0) for rel in files)
    if args.json:
        out = {
            "release": where,
            "name": body.get("name"),
            "reproduced": not differences,
            "cells": len(records),
            "files": len(files),
            "bytes": size,
            "commit": sources.commit,
            "allowed": sources.allowed,
            "toolchain": toolchain,
            "differences": [d.to_json() for d in differences],
            "build_dir": str(build_dir) if keep or differences else None,
        }
        sys.stdout.write(json.dumps(out, indent=2, sort_keys=True) + "\n")
    elif not differences:
        said = f"; allowed: {'; '.join(sources.allowed)}" if sources.allowed else ""
        print(
            f"release {body.get('name')}: reproduced: {len(records):,} cell(s), {len(files):,} file(s) ({size:,} bytes) "
            f"and every cell record rebuilt identical from commit {(sources.commit or 'none')[:12]}{said}."
        )
    else:
        first = differences[0]
        print(
            f"rbln-build reproduce: {where}: NOT reproduced: {len(differences)} difference(s); "
            f"first: {first.file}: {first.where}",
            file=sys.stderr,
        )
        cause = next((d for d in differences if d.cause), None)
        if cause is not None:
            print(f"rbln-build reproduce: likely cause: {cause.cause} ({cause.file} at {cause.where})", file=sys.stderr)
        for d in differences[1:6]:
            print(f"  also: {d.file}: {d.where}", file=sys.stderr)
        print(f"rbln-build reproduce: the rebuild is kept in {build_dir}", file=sys.stderr)
    if not differences and not keep:
        shutil.rmtree(build_dir.parent, ignore_errors=True)
    return 0 if not differences else 1
