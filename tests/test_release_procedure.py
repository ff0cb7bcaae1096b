"""rbln-build's own releases (docs/releasing.md#rbln-builds-own-versions): pyproject.toml's version,
``rbln_build.__version__``, ``rbln-build --version``, CHANGELOG.md's newest entry and every pinned
install line in README.md and docs/*.md say one version; ``scripts/release.py`` run on a copy of
the project in a fresh git repository refuses what would make a wrong tag (each cause named), bumps
a version everywhere and makes the annotated tag ``v<version>``; and (slow) the pinned install line
installs that tag from a ``git+file://`` URL."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from test_cli import rbln

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "release.py"
PINNED = re.compile(r"rbln-build(?:\[[\w,-]+\])? @ git\+\S*@v(\d[\w.+-]*)")
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def test_the_version_agrees_everywhere_the_docs_pin_it(tmp_path: Path) -> None:
    from rbln_build import __version__

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version == __version__
    entries = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert [e for e in entries if e != "Unreleased"][0] == version, entries
    pins = {
        (doc.name, v)
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for v in PINNED.findall(doc.read_text())
    }
    assert {"README.md", "releasing.md"} <= {name for name, _ in pins} and {v for _, v in pins} == {version}, pins
    proc = rbln(["--version"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith(f"rbln-build {version} ("), proc.stdout
    check = subprocess.run([sys.executable, str(SCRIPT), "check"], capture_output=True, text=True)
    assert check.returncode == 0 and f"rbln-build {version}: " in check.stdout, check.stderr


def _project_copy(dst: Path, whole: bool = False) -> Path:
    """A fresh git repository holding this project's versioned files (``whole``: all it ships)."""
    if whole:
        skip = shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".*cache*", "tests", "bench")
        shutil.copytree(ROOT, dst, ignore=skip)
    else:
        for rel in ("pyproject.toml", "CHANGELOG.md", "README.md", "rbln_build/__init__.py", "scripts/release.py"):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dst / rel)
        shutil.copytree(ROOT / "docs", dst / "docs")
    _git(dst, "init", "-q", "-b", "main")
    _git(dst, "add", "-A")
    _git(dst, "commit", "-q", "-m", "the project")
    return dst


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env={**os.environ, **GIT_ENV}
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _release(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(repo / "scripts" / "release.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
        timeout=120,
    )


def test_the_release_procedure_tags_only_what_agrees(tmp_path: Path) -> None:
    repo = _project_copy(tmp_path / "rbln-build")
    version = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"]
    # a version that disagrees anywhere is named, and nothing is tagged
    init = repo / "rbln_build" / "__init__.py"
    init.write_text(init.read_text().replace(f'"{version}"', '"9.9.9"'))
    proc = _release(repo, "tag")
    assert (
        proc.returncode == 1
        and f"rbln_build/__init__.py: __version__ is '9.9.9', pyproject.toml says '{version}'" in proc.stderr
    )
    assert "uncommitted changes (rbln_build/__init__.py)" in proc.stderr and _git(repo, "tag") == ""
    _git(repo, "checkout", "--", ".")
    readme = repo / "README.md"
    readme.write_text(readme.read_text().replace(f"@v{version}", "@v0.0.1"))
    proc = _release(repo, "check")
    assert proc.returncode == 1 and re.search(r"README\.md:\d+: the install line pins v0\.0\.1, not v", proc.stderr)
    _git(repo, "checkout", "--", ".")
    # the tag: annotated, on HEAD, its message the CHANGELOG entry
    assert _release(repo, "tag", "--dry-run").returncode == 0 and _git(repo, "tag") == ""
    proc = _release(repo, "tag")
    assert proc.returncode == 0, proc.stderr
    assert _git(repo, "cat-file", "-t", f"v{version}").strip() == "tag"
    assert _git(repo, "rev-parse", f"v{version}^{{commit}}") == _git(repo, "rev-parse", "HEAD")
    message = _git(repo, "tag", "-l", "-n99", f"v{version}")
    entry = (repo / "CHANGELOG.md").read_text().split(f"## [{version}]", 1)[1].split("\n## ", 1)[0]
    first = next(line for line in entry.splitlines() if line.startswith("- "))
    assert f"rbln-build {version}" in message and first.strip() in message  # the entry's lines
    again = _release(repo, "tag")
    assert again.returncode == 1 and f"the tag v{version} exists already" in again.stderr
    # what ships next: an entry under [Unreleased] cannot be tagged before a bump
    changelog = repo / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace("## [Unreleased]\n", "## [Unreleased]\n\n- A fix.\n", 1))
    _git(repo, "commit", "-qam", "a fix")
    proc = _release(repo, "tag")
    assert proc.returncode == 1 and "[Unreleased] has entries: they would ship" in proc.stderr
    assert _release(repo, "bump", "0.99.0", "--date", "2030-01-02").returncode == 0
    assert _release(repo, "check").returncode == 0
    assert "## [Unreleased]\n\n## [0.99.0] - 2030-01-02\n\n- A fix.\n" in changelog.read_text()
    assert '"rbln-build @ git+$RBLN_BUILD_GIT@v0.99.0"' in readme.read_text()
    assert '__version__ = "0.99.0"' in init.read_text()
    _git(repo, "commit", "-qam", "rbln-build 0.99.0")
    assert _release(repo, "tag").returncode == 0
    assert _git(repo, "tag").split() == sorted([f"v{version}", "v0.99.0"])
    assert _release(repo, "bump", "0.99.0").returncode == 1  # an entry exists already


@pytest.mark.slow
def test_the_pinned_install_line_installs_the_tagged_version(tmp_path: Path) -> None:
    repo = _project_copy(tmp_path / "rbln-build", whole=True)
    version = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"]
    assert _release(repo, "tag").returncode == 0
    _git(repo, "commit", "-q", "--allow-empty", "-m", "after the release")  # HEAD moves on: the tag is what installs
    line = PINNED.search((ROOT / "README.md").read_text())
    assert line is not None
    requirement = line.group(0).replace("$RBLN_BUILD_GIT", f"file://{repo}")
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target),
         requirement],
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV, "PIP_NO_INDEX": "1"},
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    dist = target / f"rbln_build-{version}.dist-info"
    assert dist.is_dir()
    vcs = json.loads((dist / "direct_url.json").read_text())["vcs_info"]  # pip records what it checked out
    assert vcs["requested_revision"] == f"v{version}"
    assert (
        vcs["commit_id"]
        == _git(repo, "rev-parse", f"v{version}^{{commit}}").strip()
        != _git(repo, "rev-parse", "HEAD").strip()
    )
    assert f'__version__ = "{version}"' in (target / "rbln_build" / "__init__.py").read_text()
