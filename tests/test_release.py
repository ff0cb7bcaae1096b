"""``rbln-build release`` and ``rbln-build verify`` through the real CLI, on a real build of
matrix=plans (plan cells: config.json + rbln-build.json, seconds to build) and, in the slow test, of
the tiny recipes' torch programs: real files, byte-identical releases, immutable names, every kind
of tampering named by verify, signatures, S3 (moto's server on 127.0.0.1) and no torch in verify."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_cli import PLANS, check_ok, rbln

try:  # moto's S3 server on 127.0.0.1, the fixture the remote cache's tests use
    from test_remote import s3  # noqa: F401
except pytest.skip.Exception:  # no fsspec: the S3 test skips, the others run

    @pytest.fixture
    def s3() -> Any:
        pytest.skip("fsspec is not installed (pip install 'rbln-build[remote]')")


pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def inventories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The memory model's parameter inventories, computed by the first build and shared by the
    module's builds (RBLN_BUILD_CACHE), as test_deploy_cli shares them."""
    return {"RBLN_BUILD_CACHE": str(tmp_path_factory.mktemp("inventories"))}


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory, inventories: dict[str, str]) -> Path:
    """One clean build of matrix=plans (its folder holds build/); tests copy it."""
    work = tmp_path_factory.mktemp("plans")
    check_ok(rbln([*PLANS, f"build_dir={work / 'build'}"], cwd=work, env=inventories))
    return work


def copy(plans: Path, tmp_path: Path) -> Path:
    shutil.copytree(plans / "build", tmp_path / "build", symlinks=True)
    return tmp_path


def release(work: Path, name: str, *extra: str) -> Any:
    return rbln(["release", name, "--build-dir", str(work / "build"), *extra], cwd=work)


def verify(work: Path, where: str | Path, *extra: str) -> Any:
    return rbln(["verify", str(where), *extra], cwd=work)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_release_holds_real_files_cards_and_verifies(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    proc = release(work, "v1")
    check_ok(proc)
    out = work / "build" / "releases" / "v1"
    assert f"-> {out}" in proc.stdout and "not released: qwen3_8b.atom_max_x4.b0.3 (expected_failure)" in proc.stdout
    body = json.loads((out / "release.json").read_text())
    manifest = json.loads((work / "build" / "manifest.json").read_bytes())
    assert body["manifest_sha256"] == hashlib.sha256((work / "build" / "manifest.json").read_bytes()).hexdigest()
    assert sorted(body["cells"]) == sorted(c for c, e in manifest["cells"].items() if e["status"] == "ok")
    assert body["not_released"] == {"qwen3_8b.atom_max_x4.b0.3": "expected_failure"}
    for cid, cell in body["cells"].items():
        assert cell["record"] == manifest["cells"][cid]
        names = sorted(p.name for p in (out / cid).iterdir())
        assert names == ["README.md", "config.json", "rbln-build-files.json", "rbln-build.json"]
        assert (out / cid / "config.json").read_bytes() == (
            work / "build" / "artifacts" / cid / "config.json"
        ).read_bytes()
    assert not [p for p in out.rglob("*") if p.is_symlink()]
    assert set(body["files"]) == {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {
        "release.json"
    }
    for rel, digest in body["files"].items():
        data = (out / rel).read_bytes()
        assert digest == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    prov = body["provenance"]
    assert (
        prov["rbln_build"]
        and prov["recipes"]["qwen3_8b"]["recipe_hash"]
        == (manifest["cells"]["qwen3_8b.rebel100.b0.3"]["inputs"]["recipe_hash"])
    )
    assert prov["git"] == {"commit": None, "clean": None, "note": "the project is not in a git repository"}
    assert prov["toolchains"] and prov["devices"]["rebel100"] == {"npu": "RBLN-CR03", "num_devices": 1}
    card = (out / "qwen3_8b.rebel100.b0.3" / "README.md").read_text()
    record = manifest["cells"]["qwen3_8b.rebel100.b0.3"]
    assert "| kvcache_num_blocks | **21** |" in card and "45,097,156,608 bytes per device" in card
    assert (
        f"| floor | {record['num_min_blocks']} blocks" in card
        and f"| full pool | {record['num_full_blocks']} blocks" in card
    )
    assert "RBLN_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen3-8B --port 8000 --max-num-seqs 8" in card
    assert "--gpu-memory-utilization 0.3 " in card
    proc = verify(work, out)
    check_ok(proc)
    assert proc.stdout.startswith(f"release v1: {len(body['cells'])} cells, {len(body['files'])} files (")
    assert "not signed" in proc.stdout


def test_two_releases_of_one_build_are_byte_identical_and_a_repeat_is_a_no_op(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    check_ok(release(work, "v1", "--to", str(tmp_path / "a")))
    check_ok(release(work, "v1", "--to", str(tmp_path / "b")))
    first = tree(tmp_path / "a" / "v1")
    assert first == tree(tmp_path / "b" / "v1")
    proc = release(work, "v1", "--to", str(tmp_path / "a"))
    check_ok(proc)
    assert "release v1: unchanged" in proc.stdout and "nothing written" in proc.stdout
    assert tree(tmp_path / "a" / "v1") == first
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["v1"]  # no staging folder left behind
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs: what a killed release leaves behind
    stale = tmp_path / "b" / f".tmp-v2-{gone.pid}-0badf00d"
    (stale / "cell").mkdir(parents=True)
    running = tmp_path / "b" / f".tmp-v2-{os.getpid()}-0badf00d"  # a release in progress: kept
    running.mkdir()
    check_ok(release(work, "v2", "--to", str(tmp_path / "b")))
    assert not stale.exists() and running.is_dir()


def test_a_changed_build_under_the_same_name_is_refused(
    plans: Path, tmp_path: Path, inventories: dict[str, str]
) -> None:
    work = copy(plans, tmp_path)
    check_ok(release(work, "v1"))
    before = tree(work / "build" / "releases" / "v1")
    # the same matrix with one budget moved: other cells, other block counts
    check_ok(rbln([*PLANS, "matrix.budgets=[0.3,0.6]", f"build_dir={work / 'build'}"], cwd=work, env=inventories))
    proc = release(work, "v1")
    check_ok(proc, 2)
    assert "already holds a release with different content; first difference: " in proc.stderr
    assert "llama3_2_1b.atom_max_x4.b0.5/README.md (only in the existing release)" in proc.stderr
    assert "A release name is immutable: choose a new name." in proc.stderr and "Traceback" not in proc.stderr
    assert tree(work / "build" / "releases" / "v1") == before
    check_ok(release(work, "v2"))


def test_a_selection_by_glob_and_its_errors(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    proc = release(work, "q", "--cells", "qwen3_8b.rebel100.*", "--json")
    check_ok(proc)
    out = json.loads(proc.stdout)
    assert out["cells"] == ["qwen3_8b.rebel100.b0.3", "qwen3_8b.rebel100.b0.5"] and out["outcome"] == "published"
    proc = release(work, "none", "--cells", "nope*")
    check_ok(proc, 2)
    assert "--cells 'nope*' matches no cell of" in proc.stderr
    proc = release(work, "../up")
    check_ok(proc, 2)
    assert "release name '../up' is not a safe folder name" in proc.stderr


@pytest.mark.parametrize("server", [[], ["deployment.server={cards:2}"]], ids=["one-card", "server"])
def test_a_deployment_releases_its_cells(tmp_path: Path, inventories: dict[str, str], server: list[str]) -> None:
    deployment = "qwen3_8b_llama3_2_1b"  # two plan cells on one Rebel100, or each on a card of its own
    check_ok(
        rbln([f"deployment={deployment}", *server, f"build_dir={tmp_path / 'build'}"], cwd=tmp_path, env=inventories)
    )
    cells = {
        m["cell"]
        for m in json.loads((tmp_path / "build" / "manifest.json").read_bytes())["deployments"][deployment][
            "models"
        ].values()
    }
    proc = release(tmp_path, "pair", "--deployment", deployment, "--json")
    check_ok(proc)
    assert set(json.loads(proc.stdout)["cells"]) == cells and len(cells) == 2
    body = json.loads((tmp_path / "build" / "releases" / "pair" / "release.json").read_bytes())
    assert body["selection"]["deployment"] == deployment and body["provenance"]["deployments"] == [deployment]
    proc = release(tmp_path, "none", "--deployment", "tiny_pair")
    check_ok(proc, 2)
    assert (
        f"--deployment tiny_pair: {tmp_path / 'build' / 'manifest.json'} holds no build of that deployment (built: {deployment})"
        in proc.stderr
    )


def test_a_failed_cell_stops_the_release_unless_allowed(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    path = work / "build" / "manifest.json"  # as a build with matrix.expect_failure=[] records that cell
    manifest = json.loads(path.read_bytes())
    manifest["cells"]["qwen3_8b.atom_max_x4.b0.3"]["status"] = "failed"
    path.write_text(json.dumps(manifest))
    proc = release(work, "v1")
    check_ok(proc, 2)
    assert "1 selected cell(s) of" in proc.stderr and "did not build: qwen3_8b.atom_max_x4.b0.3 (failed)" in proc.stderr
    assert "--allow-failed" in proc.stderr and not (work / "build" / "releases" / "v1").exists()
    proc = release(work, "v1", "--allow-failed")
    check_ok(proc)
    assert "not released: qwen3_8b.atom_max_x4.b0.3 (failed)" in proc.stdout


def test_a_release_waits_for_a_build_holding_the_build_dirs_lock(plans: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    from rbln_build.store import acquire_build_lock

    work = copy(plans, tmp_path)
    lock = acquire_build_lock(work / "build")  # as a running build holds it
    proc = subprocess.Popen(
        [sys.executable, "-m", "rbln_build.cli", "release", "v1", "--build-dir", str(work / "build")],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # blocks until the release says it waits
        assert "rbln-build release: waiting for another rbln-build run on" in line
        assert not (work / "build" / "releases" / "v1").exists()
    finally:
        lock.release()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "release v1: " in out and (work / "build" / "releases" / "v1" / "release.json").is_file()


def test_an_artifact_changed_after_the_build_is_not_released(plans: Path, tmp_path: Path) -> None:
    work = copy(plans, tmp_path)
    target = (work / "build" / "artifacts" / "qwen3_8b.rebel100.b0.3" / "config.json").resolve()
    target.write_bytes(target.read_bytes().replace(b"36", b"37", 1))
    proc = release(work, "v1")
    check_ok(proc, 1)
    assert "qwen3_8b.rebel100.b0.3" in proc.stderr and "does not match" in proc.stderr
    assert "Nothing was released" in proc.stderr
    assert list((work / "build" / "releases").iterdir()) == []


# -- tampering -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def released(plans: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("released")
    check_ok(rbln(["release", "v1", "--build-dir", str(plans / "build"), "--to", str(out)], cwd=plans))
    return out / "v1"


CELL = "qwen3_8b.rebel100.b0.3"


def _flip(root: Path) -> str:
    path = root / CELL / "config.json"
    data = path.read_bytes()
    path.write_bytes(data[:10] + bytes([data[10] ^ 1]) + data[11:])
    return f"{CELL}/config.json: changed: sha256 "


def _add(root: Path) -> str:
    (root / CELL / "extra.bin").write_bytes(b"x")
    return f"{CELL}/extra.bin: an extra file, not in release.json"


def _delete(root: Path) -> str:
    (root / CELL / "rbln-build.json").unlink()
    return f"{CELL}/rbln-build.json: missing"


def _symlink(root: Path) -> str:
    path = root / CELL / "config.json"
    keep = root.parent / "kept-config.json"
    shutil.copyfile(path, keep)
    path.unlink()
    path.symlink_to(keep)  # the same bytes, through a link: still refused
    return f"{CELL}/config.json: a symlink where release.json lists a file"


def _fifo(root: Path) -> str:
    path = root / CELL / "README.md"
    path.unlink()
    os.mkfifo(path)  # never opened: a reader would block on it
    return f"{CELL}/README.md: a special file where release.json lists a file"


def _truncate(root: Path) -> str:
    path = root / CELL / "README.md"
    path.write_bytes(path.read_bytes()[:-1])
    return f"{CELL}/README.md: changed: "


def _edit_release_json(root: Path) -> str:
    path = root / "release.json"
    path.write_text(path.read_text().replace('"kvcache_num_blocks": 21', '"kvcache_num_blocks": 22', 1))
    return "release.json: edited: its content_sha256 does not match its content"


def _delete_release_json(root: Path) -> str:
    (root / "release.json").unlink()
    return "release.json: missing"


@pytest.mark.parametrize(
    "tamper",
    [_flip, _add, _delete, _symlink, _fifo, _truncate, _edit_release_json, _delete_release_json],
    ids=lambda f: f.__name__.strip("_"),
)
def test_verify_names_every_kind_of_tampering(released: Path, tmp_path: Path, tamper: Any) -> None:
    root = tmp_path / "v1"
    shutil.copytree(released, root, symlinks=True)
    check_ok(verify(tmp_path, root))
    expected = tamper(root)
    proc = verify(tmp_path, root)
    check_ok(proc, 1)
    assert f"rbln-build verify: {root}/{expected}" in proc.stderr, proc.stderr
    assert "FAILED" in proc.stderr and "Traceback" not in proc.stderr


def test_run_checks_a_released_cell_against_release_json_before_it_reads_it(
    released: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m rbln_build.run <release>/<cell>` verifies the cell's files against release.json first
    (issue 19: every load verifies first). A plan cell gets as far as the runtime's own refusal when it
    matches; a changed config.json (which rbln-build.json does not cover) or an extra file stops it first."""
    from rbln_build.run import main as run_main

    root = tmp_path / "v1"
    shutil.copytree(released, root, symlinks=True)
    cell = root / CELL
    assert run_main([str(cell), "--prompt-ids", "1,2"]) == 2
    assert "this cell is a resolved plan" in capsys.readouterr().err  # checked, then refused as a plan
    config = cell / "config.json"
    config.write_bytes(config.read_bytes() + b" ")  # still valid JSON, and the same config
    assert run_main([str(cell), "--prompt-ids", "1,2"]) == 2
    err = capsys.readouterr().err
    assert f"error: {config}: changed: " in err and f"does not match {root / 'release.json'}" in err
    assert f"rbln-build verify {root}" in err and "resolved plan" not in err
    config.write_bytes(config.read_bytes()[:-1])
    (cell / "notes.txt").write_text("x")
    assert run_main([str(cell), "--prompt-ids", "1,2"]) == 2
    assert f"error: {cell / 'notes.txt'}: an extra file, not in release.json" in capsys.readouterr().err
    (cell / "notes.txt").unlink()
    other = root / "stray.cell"
    shutil.copytree(cell, other)  # beside release.json, but not one of its cells
    assert run_main([str(other), "--prompt-ids", "1,2"]) == 2
    assert f"error: {other}: not a cell of release.json" in capsys.readouterr().err
    alone = tmp_path / "alone" / CELL  # no release.json beside it: checked against its own rbln-build-files.json
    shutil.copytree(cell, alone)
    assert run_main([str(alone), "--prompt-ids", "1,2"]) == 2
    assert "this cell is a resolved plan" in capsys.readouterr().err
    (alone / "config.json").write_bytes((alone / "config.json").read_bytes() + b" ")
    assert run_main([str(alone), "--prompt-ids", "1,2"]) == 2
    err = capsys.readouterr().err
    assert f"error: {alone / 'config.json'}: changed: " in err and "rbln-build-files.json says" in err
    assert f"does not match {alone / 'rbln-build-files.json'}" in err and "resolved plan" not in err
    (alone / "rbln-build-files.json").unlink()  # neither file: a copy rbln-build cannot check, as before
    assert run_main([str(alone), "--prompt-ids", "1,2"]) == 2
    assert "this cell is a resolved plan" in capsys.readouterr().err


def test_a_card_says_a_null_budget_a_checkpoints_digest_and_how_to_prompt_a_program(released: Path) -> None:
    """The card's wording on a released record, varied where the plans build has no such cell: a null
    budget (it printed '- = <bytes>'), a checkpoint's weights digest (it printed 'sha256 `sha256:...`'),
    and a torch program with a tokenizer (only --prompt-ids was shown)."""
    from rbln_build.release._card import card_for

    record = json.loads((released / "release.json").read_bytes())["cells"][CELL]["record"]
    card = card_for(CELL, record, {})
    assert f"| requested budget | 0.3 = {record['budget_bytes']:,} bytes per device |" in card
    assert "weights from the recipe (no checkpoint digest)" in card
    digest = "sha256:" + "ab" * 32
    card = card_for(
        CELL,
        {**record, "memory_budget": None, "inputs": {**record["inputs"], "weights_hash": digest}},
        {},
    )
    assert f"| requested budget | null (all available DRAM) = {record['budget_bytes']:,} bytes per device |" in card
    assert f"weights `{digest}`" in card and "sha256 `sha256:" not in card
    program = {**record, "produced": "program"}
    with_tokenizer = card_for(CELL, program, {"tokenizer": {"files": ["tokenizer.json"]}})
    assert f'python -m rbln_build.run {CELL} --prompt "Hello" --max-new-tokens 8' in with_tokenizer
    assert f"python -m rbln_build.run {CELL} --prompt-ids 1,2,3" in with_tokenizer
    without = card_for(CELL, program, {"tokenizer": None})
    assert "--prompt " not in without and "--prompt-ids 1,2,3" in without
    assert "Tokenizer: **no tokenizer** in this cell" in without


def test_verify_imports_no_torch(released: Path, tmp_path: Path) -> None:
    modules = tmp_path / "modules.txt"
    check_ok(rbln(["verify", str(released)], cwd=tmp_path, modules=modules))
    assert modules.read_text() == ""


def test_verify_of_no_release_is_a_usage_error(tmp_path: Path) -> None:
    proc = verify(tmp_path, tmp_path / "nowhere")
    check_ok(proc, 2)
    assert "no release folder there" in proc.stderr


# -- signatures ----------------------------------------------------------------------------------


def _keys(tmp_path: Path, name: str) -> tuple[Path, Path]:
    serialization = pytest.importorskip(
        "cryptography.hazmat.primitives.serialization",
        reason="cryptography is not installed: signing needs the sign extra (pip install 'rbln-build[sign]')",
    )
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private, public = tmp_path / f"{name}.key", tmp_path / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def test_a_signed_release_verifies_with_its_key_and_an_edit_is_caught(plans: Path, tmp_path: Path) -> None:
    private, public = _keys(tmp_path, "release")
    _, other = _keys(tmp_path, "other")
    work = copy(plans, tmp_path)
    proc = release(work, "s1", "--sign", str(private), "--to", str(tmp_path / "out"))
    check_ok(proc)
    root = tmp_path / "out" / "s1"
    assert len((root / "release.json.sig").read_bytes()) == 64
    proc = verify(tmp_path, root, "--key", str(public))
    check_ok(proc)
    assert f"signature ok ({public})" in proc.stdout
    check_ok(verify(tmp_path, root))  # without --key: checked files, signature noted
    assert "signed, signature not checked" in verify(tmp_path, root).stdout
    proc = verify(tmp_path, root, "--key", str(other))
    check_ok(proc, 1)
    assert "release.json: its signature (release.json.sig) does not verify with" in proc.stderr
    # an edit that even recomputes release.json's self-hash: only the signature catches it
    from rbln_build.release._format import render_release

    body = json.loads((root / "release.json").read_bytes())
    body["cells"][CELL]["record"]["kvcache_num_blocks"] = 40
    body.pop("content_sha256")
    (root / "release.json").write_bytes(render_release(body))
    check_ok(verify(tmp_path, root))  # consistent and unsigned-checked: the documented limit
    proc = verify(tmp_path, root, "--key", str(public))
    check_ok(proc, 1)
    assert f"{root}/release.json: its signature (release.json.sig) does not verify" in proc.stderr
    (root / "release.json.sig").unlink()
    proc = verify(tmp_path, root, "--key", str(public))
    check_ok(proc, 1)
    assert f"{root}/release.json.sig: missing: --key {public} asks for a signed release" in proc.stderr


def test_two_signed_releases_are_identical_and_bad_keys_are_usage_errors(plans: Path, tmp_path: Path) -> None:
    private, public = _keys(tmp_path, "release")
    work = copy(plans, tmp_path)
    for to in ("a", "b"):
        check_ok(release(work, "s1", "--sign", str(private), "--to", str(tmp_path / to)))
    assert tree(tmp_path / "a" / "s1") == tree(tmp_path / "b" / "s1")
    proc = release(work, "s2", "--sign", str(public))
    check_ok(proc, 2)
    assert f"--sign {public}: not an unencrypted PEM private key" in proc.stderr
    assert not (work / "build" / "releases" / "s2").exists()


# -- destinations: file:// and S3 ------------------------------------------------------------------


def test_a_file_url_destination_publishes_release_json_last(plans: Path, tmp_path: Path, monkeypatch: Any) -> None:
    pytest.importorskip(
        "fsspec",
        reason="fsspec is not installed: the remote cache needs the remote extra (pip install 'rbln-build[remote]')",
    )
    from rbln_build.release import _dest
    from rbln_build.release._bundle import Selection, stage_release

    staging = tmp_path / "staging" / "u1"
    stage_release(plans / "build", "u1", Selection(), staging, plans)
    url = f"file://{tmp_path / 'remote'}"
    real_mv = _dest._mv
    moved: list[str] = []

    def failing_mv(fs: Any, src: str, dst: str) -> None:
        if len(moved) == 5:
            raise OSError("the network went away")
        moved.append(dst)
        real_mv(fs, src, dst)

    monkeypatch.setattr(_dest, "_mv", failing_mv)
    with pytest.raises(_dest.BuildError, match="nothing was made visible"):
        _dest.publish(staging, url, "u1")
    assert not (tmp_path / "remote" / "u1" / "release.json").exists()
    assert len(list((tmp_path / "remote" / "u1").rglob("*.json"))) > 0  # half uploaded, invisible
    assert not list((tmp_path / "remote" / ".tmp-release").iterdir())  # its temporaries removed
    monkeypatch.setattr(_dest, "_mv", real_mv)
    assert _dest.publish(staging, url, "u1")[1] == "published"  # the same release completes it
    check_ok(verify(tmp_path, url + "/u1"))
    assert _dest.publish(staging, url, "u1")[1] == "unchanged"


@pytest.mark.slow
def test_release_to_s3_then_verify_from_the_url(plans: Path, tmp_path: Path, s3: Any) -> None:
    env, fs, _ = s3
    work = copy(plans, tmp_path)
    url = "s3://rbln-cache/releases"
    proc = rbln(["release", "v1", "--build-dir", str(work / "build"), "--to", url], cwd=work, env=env)
    check_ok(proc)
    assert f"-> {url}/v1" in proc.stdout
    assert not fs.exists("rbln-cache/releases/.tmp-release") or not fs.find("rbln-cache/releases/.tmp-release")
    local = tmp_path / "local"
    check_ok(release(work, "v1", "--to", str(local)))
    assert fs.cat_file("rbln-cache/releases/v1/release.json") == (local / "v1" / "release.json").read_bytes()
    shutil.rmtree(work / "build")  # the consumer has no build dir
    proc = rbln(["verify", f"{url}/v1"], cwd=tmp_path, env=env)
    check_ok(proc)
    assert proc.stdout.startswith("release v1: ")
    key = f"rbln-cache/releases/v1/{CELL}/config.json"
    data = fs.cat_file(key)
    fs.pipe_file(key, data[:10] + bytes([data[10] ^ 1]) + data[11:])
    proc = rbln(["verify", f"{url}/v1"], cwd=tmp_path, env=env)
    check_ok(proc, 1)
    assert f"rbln-build verify: {url}/v1/{CELL}/config.json: changed: sha256 " in proc.stderr
    # a signed release on S3: the signature travels with it and verify --key checks it from the URL
    private, public = _keys(tmp_path, "release")
    _, other = _keys(tmp_path, "other")
    work = copy(plans, tmp_path / "again")
    check_ok(
        rbln(
            ["release", "s1", "--build-dir", str(work / "build"), "--to", url, "--sign", str(private)],
            cwd=work,
            env=env,
        )
    )
    assert len(fs.cat_file("rbln-cache/releases/s1/release.json.sig")) == 64
    proc = rbln(["verify", f"{url}/s1", "--key", str(public)], cwd=tmp_path, env=env)
    check_ok(proc)
    assert f"signature ok ({public})" in proc.stdout
    proc = rbln(["verify", f"{url}/s1", "--key", str(other)], cwd=tmp_path, env=env)
    check_ok(proc, 1)
    assert (
        f"rbln-build verify: {url}/s1/release.json: its signature (release.json.sig) does not verify with {other}"
        in (proc.stderr)
    )


def test_provenance_records_the_projects_git_commit_and_a_dirty_tree(plans: Path, tmp_path: Path) -> None:
    import subprocess

    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "rbln-build.yaml").write_text("{}\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    git_env = dict(os.environ, **env)
    for args in (["init", "-q"], ["add", "rbln-build.yaml"], ["commit", "-qm", "project"]):
        subprocess.run(["git", *args], cwd=repo, env=git_env, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    shutil.copytree(plans / "build", repo / "build", symlinks=True)  # untracked, and not part of the check
    check_ok(rbln(["release", "v1"], cwd=repo))  # the project's build/ and build/releases by default
    prov = json.loads((repo / "build" / "releases" / "v1" / "release.json").read_bytes())["provenance"]
    assert prov["git"] == {"commit": head, "clean": True}
    (repo / "rbln-build.yaml").write_text("{}  # edited\n")
    check_ok(rbln(["release", "v2"], cwd=repo))
    prov = json.loads((repo / "build" / "releases" / "v2" / "release.json").read_bytes())["provenance"]
    assert prov["git"] == {"commit": head, "clean": False}
    proc = rbln(["release", "v1"], cwd=repo)  # the same cells from a dirty tree: not the release v1 is
    check_ok(proc, 2)
    assert "first difference: release.json at provenance.git.clean (every file is the same)" in proc.stderr


def test_verify_refuses_an_oversized_release_json_before_reading_it(
    released: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    from rbln_build.release import _verify

    assert _verify.verify_release(str(released)).ok
    size = (released / "release.json").stat().st_size
    monkeypatch.setattr(_verify, "MAX_RELEASE_JSON_BYTES", size - 1)
    verdict = _verify.verify_release(str(released))
    assert verdict.problems == [("release.json", f"over {size - 1:,} bytes; refused before reading")]


def test_without_cryptography_signing_says_what_to_install(monkeypatch: Any, tmp_path: Path) -> None:
    import sys

    from rbln_build.errors import UserError
    from rbln_build.release import _sign

    monkeypatch.setitem(sys.modules, "cryptography", None)
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives", None)
    with pytest.raises(UserError, match=r"pip install 'rbln-build\[sign\]'"):
        _sign.sign(b"{}", tmp_path / "release.key")


# -- end to end: real programs and optimum-rbln cells, loaded from the release alone ---------------


@pytest.mark.slow
def test_release_of_torch_and_rbln_builds_loads_from_the_release_alone(
    tmp_path: Path, s3: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny recipes (seeded weights) built by both backends -> release to a folder and to S3 ->
    build dirs deleted -> verify both -> a torch cell generates the build's tokens from the release,
    and optimum-rbln loads every rbln cell from the release with the manifest's block count."""
    from _rbln_sdk import HAS_OPTIMUM_RBLN, sdk_env, sdk_on_path

    if not HAS_OPTIMUM_RBLN:
        pytest.skip("optimum-rbln 0.12.0 is not installed (pip install --no-deps optimum-rbln==0.12.0)")
    env, fs, _ = s3
    builds = {
        "torch": ["matrix=tiny", "matrix.budgets=[90MB]", "matrix.expect_failure=[]", "model=tiny_llama"],
        "rbln": ["matrix=tiny", "matrix.backend=rbln", "matrix.budgets=[null]", "matrix.expect_failure=[]"],
    }
    sdk = {k: v for k, v in sdk_env().items() if k != "HF_HUB_OFFLINE"}  # test_cli.rbln sets that one
    prompt = ["--prompt-ids", "1,2,3", "--max-new-tokens", "6"]
    before: dict[str, str] = {}
    for backend, args in builds.items():
        build = tmp_path / backend / "build"
        check_ok(rbln([*args, f"build_dir={build}"], cwd=tmp_path, env={**sdk, **env}))
        for to in (str(tmp_path / "out"), "s3://rbln-cache/e2e"):
            check_ok(rbln(["release", backend, "--build-dir", str(build), "--to", to], cwd=tmp_path, env=env))
        if backend == "torch":
            cell = build / "artifacts" / "tiny_llama.atom_max.b90MB"
            before["torch"] = _run_cell(cell, prompt)
        shutil.rmtree(tmp_path / backend)
    for backend in builds:
        check_ok(verify(tmp_path, tmp_path / "out" / backend))
        check_ok(rbln(["verify", f"s3://rbln-cache/e2e/{backend}"], cwd=tmp_path, env=env))
        assert (
            fs.cat_file(f"rbln-cache/e2e/{backend}/release.json")
            == (tmp_path / "out" / backend / "release.json").read_bytes()
        )
    torch_release = tmp_path / "out" / "torch"
    assert _run_cell(torch_release / "tiny_llama.atom_max.b90MB", prompt) == before["torch"]
    body = json.loads((tmp_path / "out" / "rbln" / "release.json").read_bytes())
    assert body["cells"]
    with pytest.MonkeyPatch.context() as mp:
        sdk_on_path(mp)
        from optimum.rbln import RBLNAutoModelForCausalLM

        for cid, cell in body["cells"].items():
            folder = tmp_path / "out" / "rbln" / cell["dir"]
            assert (folder / "rbln_config.json").is_file()
            model = RBLNAutoModelForCausalLM.from_pretrained(str(folder), export=False, rbln_create_runtimes=False)
            assert model.rbln_config.kvcache_num_blocks == cell["record"]["kvcache_num_blocks"], cid
            card = (folder / "README.md").read_text()
            assert f'.from_pretrained("{cid}", export=False)' in card
            # a compiled model, but without a tokenizer and with no hub model to take one from (the tiny
            # recipes are synthetic): the card gives the reason, never a command naming a made-up id
            assert "No serve command: " in card and "names no hub model" in card and "vllm serve" not in card
            assert "base_model" not in card and "library_name: optimum-rbln" in card


def _run_cell(cell: Path, prompt: list[str]) -> str:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "rbln_build.run", str(cell), *prompt], capture_output=True, text=True, timeout=300
    )
    check_ok(proc)  # type: ignore[arg-type]
    assert proc.stdout.startswith("prompt 0: ")
    return proc.stdout


def test_a_hub_layout_cell_has_hub_front_matter_and_verifies_alone(plans: Path, tmp_path: Path) -> None:
    # --layout hub: each cell folder is a model repo. Its card's front matter is what huggingface_hub
    # reads; a cell copied alone (as `huggingface-cli download --local-dir` leaves it, with the client's
    # .cache/huggingface/ and the Hub's .gitattributes) verifies against its own rbln-build-files.json,
    # and a changed byte is named.
    from huggingface_hub import ModelCard

    work = copy(plans, tmp_path)
    proc = release(work, "h1", "--layout", "hub", "--hub-org", "my-org")
    check_ok(proc)
    cid = "qwen3_8b.rebel100.b0.3"
    out = work / "build" / "releases" / "h1"
    assert f"huggingface-cli upload my-org/{cid} {out}/{cid} ." in proc.stdout
    card = ModelCard.load(out / cid / "README.md")
    data = card.data.to_dict()
    assert data == {
        "base_model": "Qwen/Qwen3-8B",
        "pipeline_tag": "text-generation",
        "license": "unknown",
        "tags": ["rbln-build", "rebellions", "RBLN-CR03", "rbln-build-plan"],
    }  # a plan: no library loads it
    assert f"huggingface-cli download my-org/{cid} --local-dir {cid}" in card.text
    alone = tmp_path / "download" / cid
    shutil.copytree(out / cid, alone)
    (alone / ".gitattributes").write_text("*.rbln filter=lfs\n")
    (alone / ".cache" / "huggingface").mkdir(parents=True)
    (alone / ".cache" / "huggingface" / ".gitignore").write_text("*\n")
    proc = verify(work, alone)
    check_ok(proc)
    size = sum((alone / n).stat().st_size for n in ("README.md", "config.json", "rbln-build.json"))
    assert proc.stdout.strip() == f"cell {cid} (release h1): 3 files ({size:,} bytes) match rbln-build-files.json."
    with open(alone / "config.json", "ab") as f:
        f.write(b" ")
    (alone / "notes.txt").write_text("hi\n")
    proc = verify(work, alone)
    check_ok(proc, 1)
    assert f"{alone}/config.json: changed: " in proc.stderr and "rbln-build-files.json says" in proc.stderr
    assert f"{alone}/notes.txt: an extra file, not in rbln-build-files.json" in proc.stderr
    check_ok(release(work, "h2", "--hub-org", "my-org"), 2)  # --hub-org needs --layout hub
