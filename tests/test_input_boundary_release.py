"""Regression tests for issue 20 (every subcommand's input errors are one line and exit 2), for the
commands that landed after its first pass: ``release``, ``verify``, ``serve-command`` (a cell folder
or a deployment), ``plan`` and ``explain``. Each case was a traceback (exit 3), a hang, an unbounded
read or a multi-line message before; found by extending tests/test_fuzz.py to these commands.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from test_input_boundary import one_line_error, run_cli

SERVING = {
    "engine": "vllm-rbln==0.12.0",
    "model": "Qwen/Qwen3-0.6B",
    "precompiled": False,
    "tokenizer": "Qwen/Qwen3-0.6B",
    "kvcache_num_blocks": 3,
    "exact": True,
    "refused": None,
    "flags": {"max_num_seqs": 1, "rbln_num_devices_per_local_rank": 2},
    "notes": [],
}


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """Build dirs whose manifest.json is hostile, a symlink loop, a file, a FIFO; nothing else."""
    for name, text in {"deep": "[" * 100_000 + "]" * 100_000, "list": "[1]", "nocells": '{"cells": 5}'}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(text)
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "manifest.json")
    (tmp_path / "zero").mkdir()
    os.symlink("/dev/zero", tmp_path / "zero" / "manifest.json")
    (tmp_path / "deployments").mkdir()
    (tmp_path / "deployments" / "manifest.json").write_text(
        json.dumps({"cells": {"c": {"status": "ok", "artifact": {"content_hash": "ab"}}}, "deployments": 5})
    )
    (tmp_path / "afile").write_text("x")
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    return tmp_path


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def watchdog() -> None:
    """A FIFO read would block for ever: open its writing end after 20 s so that a regression fails
    the test instead of hanging the suite."""
    timer = threading.Timer(20.0, lambda: [_unblock(p) for p in _FIFOS])
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()


_FIFOS: list[Path] = []


def _unblock(path: Path) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


@pytest.mark.parametrize(
    ("build_dir", "says"),
    [
        pytest.param("deep", "nested deeper than 64 levels", id="deep"),
        pytest.param("fifo", "is not a regular file", id="fifo"),
        pytest.param("list", "no 'cells' object", id="not-a-mapping"),
        pytest.param("nocells", "no 'cells' object", id="cells-not-a-mapping"),
        pytest.param("missing", "no manifest; build first", id="missing"),
        pytest.param("loop1", "Too many levels of symbolic links", id="symlink-loop"),
        pytest.param("afile", "Not a directory", id="under-a-file"),
    ],
)
def test_release_reads_a_hostile_manifest_bounded_and_writes_nothing(
    world: Path, watchdog: None, build_dir: str, says: str
) -> None:
    """Before: deep JSON was an internal error (exit 3), a FIFO or /dev/zero hung (the latter growing
    without bound), and every refusal left an empty <build_dir>/releases behind."""
    _FIFOS.append(world / "fifo" / "manifest.json")
    before = listing(world)
    code, _, err = run_cli(["release", "r1", "--build-dir", build_dir], world)
    line = one_line_error(code, err, "rbln-build release: ")
    assert f"{build_dir}/manifest.json" in line and says in line
    assert listing(world) == before


def test_release_of_a_dev_zero_manifest_is_refused_before_reading(world: Path) -> None:
    """/dev/zero as the manifest: before, read whole (memory grew until killed). In a subprocess with
    its address space capped, so that a regression fails here instead of exhausting the machine."""
    import resource
    import subprocess
    import sys

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", "release", "r1", "--build-dir", "zero"],
        cwd=world,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=cap,
    )
    line = one_line_error(proc.returncode, proc.stderr, "rbln-build release: ")
    assert "zero/manifest.json: is not a regular file" in line
    assert not (world / "zero" / "releases").exists()


def test_release_of_a_deployment_from_a_manifest_whose_deployments_is_not_an_object(world: Path) -> None:
    code, _, err = run_cli(["release", "r1", "--build-dir", "deployments", "--deployment", "d"], world)
    line = one_line_error(code, err, "rbln-build release: ")
    assert "deployments/manifest.json" in line and "'deployments' is a int" in line


def test_the_default_destination_is_named_as_such_when_it_cannot_be_made(world: Path) -> None:
    """--to was not given: the message names the default place, not a --to the user never typed."""
    (world / "built").mkdir()
    (world / "built" / "manifest.json").write_text(
        json.dumps({"cells": {"c": {"status": "ok", "artifact": {"content_hash": "ab"}}}})
    )
    (world / "built" / "artifacts").mkdir()  # the cell's link (a cell without one is looked for on the remote)
    (world / "built" / "artifacts" / "c").symlink_to(world / "built")
    (world / "built" / "releases").write_text("a file where the folder belongs")
    code, _, err = run_cli(["release", "r1", "--build-dir", "built"], world)
    line = one_line_error(code, err, "rbln-build release: ")
    assert "built/releases (the default --to" in line and "choose a writable one with --to DIR" in line


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        pytest.param(["verify", "x" * 300], "File name too long", id="verify-name-too-long"),
        pytest.param(["verify"], "the following arguments are required: RELEASE", id="verify-usage"),
        pytest.param(["release"], "the following arguments are required: NAME", id="release-usage"),
        pytest.param(["release", "a", "b"], "'b': release takes only cache.KEY=VALUE overrides", id="release-extra"),
        pytest.param(["serve-command", "c", "--port", "99999999999"], "from 1 to 65535", id="serve-port"),
        pytest.param(["serve-command", "c", "--devices", "a"], "device ids like 0,1", id="serve-devices"),
        pytest.param(["serve-command", "x" * 300], "File name too long", id="serve-name-too-long"),
    ],
)
def test_usage_and_path_errors_are_one_line(world: Path, argv: list[str], says: str) -> None:
    """Before: verify of an over-long name was an internal error (exit 3); argparse's usage errors
    were three lines."""
    code, _, err = run_cli(argv, world)
    assert says in one_line_error(code, err, f"rbln-build {argv[0]}: ")


@pytest.mark.parametrize(
    ("key_file", "says"),
    [
        pytest.param("fifo", "is not a regular file", id="fifo"),
        pytest.param("/dev/zero", "is not a regular file", id="dev-zero"),
        pytest.param("loop1", "Too many levels of symbolic links", id="symlink-loop"),
    ],
)
def test_a_key_file_is_read_bounded(world: Path, watchdog: None, key_file: str, says: str) -> None:
    """Before: --sign FIFO waited for a writer for ever (the key was opened with open())."""
    from rbln_build.errors import UserError
    from rbln_build.release._sign import _read_key

    path = world / "fifo" / "manifest.json" if key_file == "fifo" else Path(key_file)
    _FIFOS.append(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(world)
        with pytest.raises(UserError, match=says) as caught:
            _read_key(path, "--key")
    assert str(caught.value).startswith(f"--key {path}: ")


def _cell(root: Path, manifest: object) -> Path:
    cell = root / "b" / "artifacts" / "c"
    cell.mkdir(parents=True)
    (cell / "rbln-build.json").write_text("{}")
    (root / "b" / "manifest.json").write_text(json.dumps(manifest))
    return cell


@pytest.mark.parametrize(
    ("serving", "says"),
    [
        pytest.param(5, "its serving record is a int, not an object", id="not-an-object"),
        pytest.param({**SERVING, "flags": 5}, "'flags' that are not an object", id="flags"),
        pytest.param(
            {**SERVING, "flags": {"rbln_num_devices_per_local_rank": 100_000}},  # 10**9 was a 10**9-long list
            "over the limit of 64",
            id="devices-over-the-limit",
        ),
        pytest.param(
            {**SERVING, "flags": {"rbln_num_devices_per_local_rank": "2"}}, "expected an integer", id="devices-str"
        ),
        pytest.param({**SERVING, "notes": [1]}, "'notes' that are not a list of strings", id="notes"),
        pytest.param({**SERVING, "model": ["m"]}, "'model'", id="model-not-a-string"),
        pytest.param({**SERVING, "model": None}, "names no model", id="no-model"),
        pytest.param({**SERVING, "exact": "yes"}, "'exact'", id="exact"),
        pytest.param({**SERVING, "kvcache_num_blocks": -1}, "'kvcache_num_blocks'", id="blocks"),
        pytest.param({k: v for k, v in SERVING.items() if k != "flags"}, "'flags'", id="no-flags"),
    ],
)
def test_serve_command_checks_the_serving_record_it_reads(tmp_path: Path, serving: object, says: str) -> None:
    """Before: a record of another shape was a KeyError/TypeError (exit 3), and any device count was
    taken (10**9 built a billion-long device list and was killed for its memory)."""
    cell = _cell(tmp_path, {"cells": {"c": {"status": "ok", "serving": serving}}})
    code, out, err = run_cli(["serve-command", str(cell)], tmp_path)
    line = one_line_error(code, err, "rbln-build serve-command: ")
    assert f"{cell}: cell c: its serving record" in line and says in line and out == ""


def test_serve_command_of_a_good_record_still_prints_its_command(tmp_path: Path) -> None:
    cell = _cell(tmp_path, {"cells": {"c": {"status": "ok", "serving": SERVING}}})
    code, out, err = run_cli(["serve-command", str(cell), "--port", "8001"], tmp_path)
    assert code == 0 and err == ""
    assert "RBLN_VISIBLE_DEVICES=0,1 vllm serve Qwen/Qwen3-0.6B --port 8001" in out


@pytest.mark.parametrize(
    ("manifest", "says"),
    [
        pytest.param("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels", id="deep"),
        pytest.param(None, "is not a regular file", id="fifo"),
    ],
)
def test_serve_command_reads_the_cells_manifest_bounded(
    tmp_path: Path, watchdog: None, manifest: str | None, says: str
) -> None:
    """Before: the manifest beside a cell was read whole with read_text (a FIFO hung, deep JSON was
    a RecursionError, exit 3)."""
    cell = _cell(tmp_path, {})
    (tmp_path / "b" / "manifest.json").unlink()
    if manifest is None:
        os.mkfifo(tmp_path / "b" / "manifest.json")
        _FIFOS.append(tmp_path / "b" / "manifest.json")
    else:
        (tmp_path / "b" / "manifest.json").write_text(manifest)
    code, _, err = run_cli(["serve-command", str(cell)], tmp_path)
    line = one_line_error(code, err, "rbln-build serve-command: ")
    assert "b/manifest.json" in line and says in line


def test_serve_command_of_a_deployment_checks_its_records(tmp_path: Path) -> None:
    """The deployment's serving records and serve_budget_bytes, from a manifest anyone may edit."""
    build = tmp_path / "build"
    build.mkdir()
    models = {"tiny_llama": {"cell": "l"}, "tiny_qwen3": {"cell": "q"}}  # tiny_pair's order
    manifest = {
        "cells": {"l": {"serving": {**SERVING, "flags": 5}}, "q": {"serving": SERVING}},
        "deployments": {"tiny_pair": {"models": models}},
    }
    (build / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = run_cli(["serve-command", "deployment=tiny_pair", f"build_dir={build}"], tmp_path)
    line = one_line_error(code, err, "rbln-build serve-command: ")
    assert "manifest.json: cell l: its serving record has 'flags' that are not an object" in line
    manifest["cells"]["l"] = {"serving": SERVING}
    models["tiny_llama"]["serve_budget_bytes"] = "lots"
    (build / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = run_cli(["serve-command", "deployment=tiny_pair", f"build_dir={build}"], tmp_path)
    line = one_line_error(code, err, "rbln-build serve-command: ")
    assert "serve_budget_bytes of tiny_llama is 'lots', not a positive integer" in line
    assert line.startswith(f"rbln-build serve-command: {build}/manifest.json: ")  # one prefix, not two


@pytest.mark.parametrize("command", ["plan", "explain", "serve-command"])
def test_hydras_own_errors_are_one_line_in_the_deployment_commands(tmp_path: Path, command: str) -> None:
    """Before: Hydra's 'Could not find' listed the options and the config search path on nine lines."""
    code, _, err = run_cli([command, "deployment=../x"], tmp_path)
    line = one_line_error(code, err, f"rbln-build {command}: ")
    assert "deployment=../x: no such option; (the options: " in line and "tiny_pair" in line


@pytest.mark.parametrize(
    ("manifest", "says"),
    [
        pytest.param("[" * 100_000 + "]" * 100_000, "maximum recursion depth", id="deep"),
        pytest.param("9" * 5000, "not a readable rbln-build manifest", id="huge-integer"),
    ],
)
def test_gc_remote_reads_its_manifests_bounded(tmp_path: Path, manifest: str, says: str) -> None:
    """``gc --remote MANIFEST``: a deep document was a RecursionError (exit 3) before anything remote
    was touched; now the one-line error that names it, and nothing removed."""
    (tmp_path / "m.json").write_text(manifest)
    remote = tmp_path / "remote"
    remote.mkdir()
    code, _, err = run_cli(["gc", "--remote", "m.json", f"cache.remote=file://{remote}"], tmp_path)
    line = one_line_error(code, err, "rbln-build gc: ")
    assert "m.json: not a readable rbln-build manifest" in line and says in line
    assert list(remote.iterdir()) == []
