"""``rbln-build reproduce RELEASE``, through the real CLI: a release of matrix=plans made from a clean
commit of a git project is rebuilt from a ``git clone`` of that project at another path with another
HOME and found identical; a changed recipe byte, a changed toolchain record and a tampered release
each exit 1 naming the cause; a dirty or other checkout is refused unless allowed. The functions that
say where inside a file two versions differ are checked on real JSON, zip and safetensors files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from test_cli import PLANS, REPO, check_ok, rbln

from rbln_build.release._format import render_release
from rbln_build.reproduce._inside import json_difference, where_inside

try:  # moto's S3 server on 127.0.0.1, the fixture the remote cache's tests use
    from test_remote import s3  # noqa: F401
except pytest.skip.Exception:  # no fsspec: the S3 test skips, the others run

    @pytest.fixture
    def s3() -> Any:
        pytest.skip("fsspec is not installed (pip install 'rbln-build[remote]')")


_GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
LLAMA = "llama3_2_1b.rebel100.*"  # two cells: the narrowed reproduces rebuild only these


def git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, **_GIT)
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A git project (its own copy of the llama3_2_1b recipe), built (matrix=plans) and released from
    its clean commit to a folder outside it; {"project", "release", "commit"}."""
    base = tmp_path_factory.mktemp("reproduce")
    project = base / "project"
    (project / "recipes").mkdir(parents=True)
    (project / "rbln-build.yaml").write_text("{}\n")
    (project / ".gitignore").write_text("build/\n")
    shutil.copytree(REPO / "recipes" / "llama3_2_1b", project / "recipes" / "llama3_2_1b")
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "the project")
    check_ok(rbln(PLANS, cwd=project))
    check_ok(rbln(["release", "v1", "--to", str(base / "releases")], cwd=project))
    body = json.loads((base / "releases" / "v1" / "release.json").read_bytes())
    assert body["provenance"]["git"] == {"commit": git(project, "rev-parse", "HEAD"), "clean": True}
    return {"project": project, "release": base / "releases" / "v1", "base": base}


def clone(released: dict[str, Path], tmp_path: Path) -> Path:
    out = tmp_path / "elsewhere" / "checkout"
    out.parent.mkdir()
    git(tmp_path, "clone", "-q", str(released["project"]), str(out))
    return out


def reproduce(checkout: Path, release: Path, *extra: str, home: Path | None = None) -> Any:
    env = {"HOME": str(home)} if home is not None else None
    return rbln(["reproduce", str(release), *extra], cwd=checkout, env=env)


def edit_release(release: Path, into: Path, change: Any) -> Path:
    """A copy of ``release`` whose release.json ``change(body)`` edited, its self-hash recomputed
    (so ``verify`` passes it: what only a rebuild can catch)."""
    shutil.copytree(release, into)
    body = json.loads((into / "release.json").read_bytes())
    body.pop("content_sha256")
    change(body, into)
    (into / "release.json").write_bytes(render_release(body))
    return into


def test_a_release_reproduces_from_a_clone_at_another_path_and_home(released: dict[str, Path], tmp_path: Path) -> None:
    checkout = clone(released, tmp_path)
    home = tmp_path / "other-home"
    home.mkdir()
    proc = reproduce(checkout, released["release"], "--json", home=home)
    check_ok(proc)
    verdict = json.loads(proc.stdout)
    assert verdict["reproduced"] is True and verdict["differences"] == [] and verdict["build_dir"] is None
    assert (verdict["name"], verdict["cells"], verdict["files"]) == (
        "v1",
        7,
        28,
    )  # 4 files a cell: its program or plan record, card, config, own integrity file
    assert verdict["commit"] == git(checkout, "rev-parse", "HEAD") and verdict["allowed"] == verdict["toolchain"] == []


def test_a_changed_recipe_byte_is_refused_then_named_as_the_cause(released: dict[str, Path], tmp_path: Path) -> None:
    checkout = clone(released, tmp_path)
    recipe = checkout / "recipes" / "llama3_2_1b" / "recipe.yaml"
    recipe.write_bytes(recipe.read_bytes() + b"\n")
    proc = reproduce(checkout, released["release"], "--cells", LLAMA)
    check_ok(proc, 2)
    assert "uncommitted changes (recipes/llama3_2_1b/recipe.yaml)" in proc.stderr and "--allow-dirty" in proc.stderr
    proc = reproduce(checkout, released["release"], "--cells", LLAMA, "--allow-dirty")
    check_ok(proc, 1)
    assert "allowed: this checkout has uncommitted changes (recipes/llama3_2_1b/recipe.yaml)" in proc.stderr
    assert "NOT reproduced" in proc.stderr
    assert "first: llama3_2_1b.rebel100.b0.3/README.md: line " in proc.stderr  # the card names the recipe digest
    assert "likely cause: the recipe llama3_2_1b" in proc.stderr
    assert "cells.llama3_2_1b.rebel100.b0.3.record.inputs.recipe_hash" in proc.stderr
    git(checkout, "commit", "-qam", "a recipe byte")  # committed: another commit than the release's
    proc = reproduce(checkout, released["release"], "--cells", LLAMA)
    check_ok(proc, 2)
    assert "the release was built from commit" in proc.stderr and "--allow-other-commit" in proc.stderr
    proc = reproduce(checkout, released["release"], "--cells", LLAMA, "--allow-other-commit")
    check_ok(proc, 1)
    assert "likely cause: the recipe llama3_2_1b" in proc.stderr


def test_a_changed_toolchain_record_is_said_first(released: dict[str, Path], tmp_path: Path) -> None:
    def older_torch(body: dict[str, Any], root: Path) -> None:
        for cell in body["cells"].values():
            cell["record"]["inputs"]["toolchain"]["torch"] = "2.12.0"

    release = edit_release(released["release"], tmp_path / "v1", older_torch)
    check_ok(rbln(["verify", str(release)], cwd=tmp_path))  # a consistent release: only a rebuild tells
    proc = reproduce(clone(released, tmp_path), release, "--cells", LLAMA)
    check_ok(proc, 1)
    first = proc.stderr.splitlines()[0]
    assert first.startswith(
        "rbln-build reproduce: the toolchain differs from the release's: torch 2.12.0 in the release"
    )
    assert "(the likely cause of any difference below)" in first
    assert "likely cause: the toolchain" in proc.stderr
    assert 'record.inputs.toolchain.torch: "2.12.0" in the release' in proc.stderr


def test_a_tampered_release_is_caught_by_verify_or_by_the_rebuild(released: dict[str, Path], tmp_path: Path) -> None:
    checkout = clone(released, tmp_path)
    config = "llama3_2_1b.rebel100.b0.3/config.json"

    def more_layers(body: dict[str, Any], root: Path) -> None:  # the file and its entry, consistently
        data = json.loads((root / config).read_bytes())
        data["num_hidden_layers"] += 1
        (root / config).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        digest = subprocess.run(["sha256sum", str(root / config)], capture_output=True, text=True).stdout.split()[0]
        body["files"][config] = {"sha256": digest, "size": (root / config).stat().st_size}

    release = edit_release(released["release"], tmp_path / "v1", more_layers)
    check_ok(rbln(["verify", str(release)], cwd=tmp_path))
    proc = reproduce(checkout, release, "--cells", LLAMA)
    check_ok(proc, 1)
    assert f"first: {config}: at num_hidden_layers: 17 in the release, 16 in the rebuild" in proc.stderr

    plain = tmp_path / "plain"
    shutil.copytree(released["release"], plain)
    (plain / config).write_bytes((plain / config).read_bytes() + b" ")  # release.json not updated
    proc = reproduce(checkout, plain, "--cells", LLAMA)
    check_ok(proc, 1)
    assert f"{plain}/{config}: changed:" in proc.stderr and "the release does not verify" in proc.stderr


@pytest.mark.slow  # over 10 s beside the folder cases it repeats: the default suite keeps under 10 minutes
def test_a_release_at_a_url_is_reproduced_and_a_difference_found_inside_a_downloaded_file(
    released: dict[str, Path], tmp_path: Path, s3: Any
) -> None:
    env, fs, _ = s3
    checkout = clone(released, tmp_path)
    fs.put(str(released["release"]), "rbln-cache/reproduce-url/v1", recursive=True)
    url = "s3://rbln-cache/reproduce-url/v1"
    proc = rbln(["reproduce", url, "--cells", LLAMA], cwd=checkout, env=env)
    check_ok(proc)
    commit = git(checkout, "rev-parse", "HEAD")[:12]
    assert "release v1: reproduced: 2 cell(s), 8 file(s)" in proc.stdout and f"from commit {commit}." in proc.stdout

    def more_layers(body: dict[str, Any], root: Path) -> None:
        config = "llama3_2_1b.rebel100.b0.5/config.json"
        data = json.loads((root / config).read_bytes())
        data["num_hidden_layers"] += 1
        (root / config).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        digest = subprocess.run(["sha256sum", str(root / config)], capture_output=True, text=True).stdout.split()[0]
        body["files"][config] = {"sha256": digest, "size": (root / config).stat().st_size}

    edited = edit_release(released["release"], tmp_path / "edited", more_layers)
    fs.put(str(edited), "rbln-cache/reproduce-url/v2", recursive=True)
    proc = rbln(["reproduce", "s3://rbln-cache/reproduce-url/v2", "--cells", LLAMA], cwd=checkout, env=env)
    check_ok(proc, 1)
    assert "first: llama3_2_1b.rebel100.b0.5/config.json: at num_hidden_layers: 17 in the release" in proc.stderr


def test_a_build_dir_that_is_not_empty_is_refused(released: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    proc = reproduce(clone(released, tmp_path), released["release"], "--build-dir", str(tmp_path / "used"))
    check_ok(proc, 2)
    assert "not empty" in proc.stderr


def test_where_inside_names_a_json_key_an_archive_member_and_a_tensor(tmp_path: Path) -> None:
    assert json_difference({"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}) == "a.b[1]: 2 in the release, 3 in the rebuild"
    assert json_difference({"a": 1}, {"a": 1.0}) == "a: 1 in the release, 1.0 in the rebuild"
    assert json_difference({"a": 1}, {"a": 1, "b": 2}) == "b (only in the rebuild)"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for root, code in ((a, b"x = 1"), (b, b"x = 2")):
        with zipfile.ZipFile(root / "program.pt2", "w") as z:
            z.writestr("program/data/constants.pt", b"same")
            z.writestr("program/code/forward.py", code)
    assert where_inside(a / "program.pt2", b / "program.pt2").startswith("archive member program/code/forward.py (")
    import torch
    from safetensors.torch import save_file

    save_file({"w1": torch.zeros(4), "w2": torch.ones(2)}, str(a / "model.safetensors"))
    save_file({"w1": torch.zeros(4), "w2": torch.full((2,), 2.0)}, str(b / "model.safetensors"))
    assert where_inside(a / "model.safetensors", b / "model.safetensors").startswith("tensor w2 (")
    (a / "blob.bin").write_bytes(b"abcdef")
    (b / "blob.bin").write_bytes(b"abcxef")
    assert where_inside(a / "blob.bin", b / "blob.bin") == "from byte 3 (6 bytes in the release, 6 rebuilt)"


def test_a_deployments_release_is_refused_with_what_to_do(released: dict[str, Path], tmp_path: Path) -> None:
    def a_deployment(body: dict[str, Any], root: Path) -> None:
        body["selection"]["deployment"] = "tiny_pair"

    release = edit_release(released["release"], tmp_path / "v1", a_deployment)
    proc = reproduce(clone(released, tmp_path), release)
    check_ok(proc, 2)
    assert "a release of deployment 'tiny_pair'" in proc.stderr and "rbln-build diff" in proc.stderr
