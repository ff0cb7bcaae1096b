"""rbln-build's own releases: one version everywhere, a CHANGELOG entry for it, an annotated tag.

    python scripts/release.py check              # the version agrees everywhere (exit 1 naming what does not)
    python scripts/release.py bump 0.3.0         # a new version: pyproject.toml, rbln_build/__init__.py, the
                                                 # pinned install lines, CHANGELOG's [Unreleased] -> [0.3.0]
    python scripts/release.py tag [--dry-run]    # check, then `git tag -a v<version>` with its CHANGELOG entry

The version is written in ``pyproject.toml`` (``project.version``) and ``rbln_build/__init__.py``
(``__version__``); ``CHANGELOG.md``'s newest released heading (``## [X.Y.Z]``) names it; every
pinned install line in README.md and docs/*.md (``rbln-build @ git+URL@vX.Y.Z``) pins it. ``tag``
also refuses a tree with uncommitted changes, a tag that exists, an empty entry, and entries still
under ``[Unreleased]`` (they would ship in the tag without being in its entry: ``bump`` first). It
creates the tag in the repository the script belongs to (or ``--root``); it never pushes.
Exit status: 0 done, 1 a check failed (each problem named), 2 a usage error.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION = re.compile(r"\d+\.\d+\.\d+(?:[.-]?(?:a|b|rc|post|dev)\d+)?")
PIN = re.compile(r"rbln-build(?:\[[\w,-]+\])? @ git\+[^\s'\"@]*(?:@[^\s'\"@]+)*?@v(?P<version>[0-9][0-9A-Za-z.+-]*)")
HEADING = re.compile(r"^## \[(?P<name>[^\]]+)\](?P<rest>.*)$", re.M)
INIT_VERSION = re.compile(r'^__version__ = "(?P<version>[^"]*)"$', re.M)
PYPROJECT_VERSION = re.compile(r'^version = "(?P<version>[^"]*)"$', re.M)


def docs(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def pyproject_version(root: Path) -> str:
    return str(tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"])


def package_version(root: Path) -> str | None:
    match = INIT_VERSION.search((root / "rbln_build" / "__init__.py").read_text(encoding="utf-8"))
    return match.group("version") if match else None


def changelog_entries(root: Path) -> list[tuple[str, str]]:
    """(heading name, body) of each ``## [...]`` section of CHANGELOG.md, in order."""
    text = (root / "CHANGELOG.md").read_text(encoding="utf-8")
    heads = list(HEADING.finditer(text))
    return [
        (h.group("name"), text[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)].strip())
        for i, h in enumerate(heads)
    ]


def pinned_lines(root: Path) -> list[tuple[str, int, str]]:
    """(file, line number, pinned version) of every pinned install line in README.md and docs/*.md."""
    out = []
    for doc in docs(root):
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            out += [(doc.relative_to(root).as_posix(), n, m.group("version")) for m in PIN.finditer(line)]
    return out


def problems(root: Path) -> list[str]:
    """What disagrees with pyproject.toml's version (empty: all agree)."""
    version = pyproject_version(root)
    found = []
    if not VERSION.fullmatch(version):
        found.append(f"pyproject.toml: project.version {version!r} is not a version (X.Y.Z)")
    if package_version(root) != version:
        found.append(
            f"rbln_build/__init__.py: __version__ is {package_version(root)!r}, pyproject.toml says {version!r}"
        )
    released = [(name, body) for name, body in changelog_entries(root) if name != "Unreleased"]
    if not released or released[0][0] != version:
        newest = released[0][0] if released else None
        found.append(f"CHANGELOG.md: the newest entry is [{newest}], not [{version}]: add `## [{version}]` above it")
    elif not released[0][1]:
        found.append(f"CHANGELOG.md: the entry [{version}] says nothing: what changes for a user?")
    pins = pinned_lines(root)
    if not pins:
        found.append("README.md, docs/*.md: no pinned install line (`pip install 'rbln-build @ git+URL@vX.Y.Z'`)")
    found += [
        f"{doc}:{n}: the install line pins v{pinned}, not v{version}" for doc, n, pinned in pins if pinned != version
    ]
    return found


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)


def tag(root: Path, dry_run: bool) -> int:
    found = problems(root)
    version = pyproject_version(root)
    name = f"v{version}"
    unreleased = dict(changelog_entries(root)).get("Unreleased", "")
    if re.search(r"^\s*[-*] ", unreleased, re.M):
        found.append(f"CHANGELOG.md: [Unreleased] has entries: they would ship in {name} unnamed (bump first)")
    status = git(root, "status", "--porcelain", "-uno")
    if status.returncode != 0:
        found.append(f"{root}: not a git work tree ({status.stderr.strip()})")
    elif status.stdout.strip():
        changed = ", ".join(line[3:] for line in status.stdout.splitlines()[:5])
        found.append(f"{root}: uncommitted changes ({changed}): commit them, a tag names a commit")
    if git(root, "rev-parse", "-q", "--verify", f"refs/tags/{name}").returncode == 0:
        found.append(f"the tag {name} exists already: bump the version for what ships next")
    if found:
        print("\n".join(f"release: {p}" for p in found), file=sys.stderr)
        return 1
    body = dict(changelog_entries(root))[version]
    message = f"rbln-build {version}\n\n{body}\n"
    if dry_run:
        print(f"would run: git tag -a {name} (on {git(root, 'rev-parse', '--short=12', 'HEAD').stdout.strip()})")
        print(message)
        return 0
    made = subprocess.run(["git", "-C", str(root), "tag", "-a", name, "-F", "-"], input=message, text=True)
    if made.returncode != 0:
        return 1
    print(f"tagged {name}; publish it with: git push origin {name}")
    return 0


def bump(root: Path, new: str, today: str) -> int:
    if not VERSION.fullmatch(new):
        print(f"release: bump {new!r}: not a version (X.Y.Z)", file=sys.stderr)
        return 2
    old = pyproject_version(root)
    entries = changelog_entries(root)
    if any(name == new for name, _ in entries):
        print(f"release: CHANGELOG.md has an entry [{new}] already", file=sys.stderr)
        return 1
    unreleased = dict(entries).get("Unreleased")
    if not unreleased:
        print("release: CHANGELOG.md's [Unreleased] is empty: nothing would ship in a new version", file=sys.stderr)
        return 1
    path = root / "CHANGELOG.md"
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^## \[Unreleased\]$", f"## [Unreleased]\n\n## [{new}] - {today}", text, count=1, flags=re.M)
    path.write_text(text, encoding="utf-8")
    for rel, pattern in (("pyproject.toml", PYPROJECT_VERSION), ("rbln_build/__init__.py", INIT_VERSION)):
        p = root / rel
        p.write_text(
            pattern.sub(lambda m: m.group(0).replace(m.group("version"), new), p.read_text()), encoding="utf-8"
        )
    for doc in docs(root):
        body = doc.read_text(encoding="utf-8")
        pinned = PIN.sub(lambda m: m.group(0)[: m.start("version") - m.start()] + new, body)
        if pinned != body:
            doc.write_text(pinned, encoding="utf-8")
    print(f"rbln-build {old} -> {new}: review `git diff`, commit, then: python scripts/release.py tag")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="scripts/release.py")
    parser.add_argument("--root", type=Path, default=ROOT, help="the rbln-build checkout (default: this one)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="the version agrees everywhere")
    b = sub.add_parser("bump", help="set a new version everywhere and open its CHANGELOG entry")
    b.add_argument("version")
    b.add_argument("--date", default=datetime.date.today().isoformat(), help="the entry's date (default: today)")
    t = sub.add_parser("tag", help="check, then create the annotated tag v<version>")
    t.add_argument("--dry-run", action="store_true", help="say what would be tagged, create nothing")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if args.command == "bump":
        return bump(root, args.version, args.date)
    if args.command == "tag":
        return tag(root, args.dry_run)
    found = problems(root)
    if found:
        print("\n".join(f"release: {p}" for p in found), file=sys.stderr)
        return 1
    print(f"rbln-build {pyproject_version(root)}: pyproject.toml, rbln_build/__init__.py, CHANGELOG.md and "
          f"{len(pinned_lines(root))} pinned install line(s) agree")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
