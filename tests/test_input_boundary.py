"""Regression tests for issue 20 (second hardening pass), part b: every subcommand's input errors are
one line and exit 2, the same limits wherever a number enters, failures told truthfully, projects.

Most run the CLI in process (``cli.main`` with ``sys.argv`` set: the same boundary as the
installed command, in a fraction of the time); a few build something small.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import struct
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from _rbln_sdk import needs_optimum_rbln, sdk_on_path
from hypothesis import given, settings
from hypothesis import strategies as st
from test_checkpoint import CONFIG, checkpoint

from rbln_build import _documents, cli
from rbln_build.config._config import compose_settings
from rbln_build.config._matrix import expand
from rbln_build.config._project import load_project
from rbln_build.errors import ConfigError, InputError, RecipeError
from rbln_build.inspection._jsonl import main as estimate_main
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe
from rbln_build.memory._shipped import shipped_dir
from rbln_build.scaffold._init import scaffold
from rbln_build.store._packing import _unpack
from rbln_build.store._remote import RemoteStore

TOOLCHAIN = {"torch": "t", "transformers": "t", "format": "1"}
TEMPLATE = {
    "npu": "RBLN-CA25",
    "batch_size": 8,
    "max_seq_len": 40960,
    "attn_impl": "flash_attn",
    "kvcache_partition_len": 8192,
    "memory_budget": 0.65,
    "alloc": {"prefill": {"weights": [[10737418240]]}},
    "kv_tensors": {"k0": {"can_resize": True, "sizes": [[3145728]]}, "v0": {"can_resize": True, "sizes": [[3145728]]}},
}


def run_cli(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``rbln-build ARGV`` run in process from ``cwd``."""
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        mp.setattr(sys, "argv", ["rbln-build", *argv])
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as exc:
                code = exc.code
    return int(code or 0), out.getvalue(), err.getvalue()


def one_line_error(code: int, err: str, prog: str, expected: int = 2) -> str:
    assert code == expected, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prog) and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A folder of hostile documents and paths."""
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "wrong.json").write_text('{"cells": {"a": 1}}')
    (tmp_path / "wrong2.json").write_text('{"cells": {"a": {"inputs": 5}}}')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder").mkdir()
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    return tmp_path


# -- 1. one boundary: input errors are one line and exit 2, everywhere -------------------------------


@pytest.mark.parametrize(
    ("path", "says"),
    [
        pytest.param("deep.json", "nested deeper than 64 levels", id="deep"),
        pytest.param("wrong.json", "cells.a is not a manifest entry", id="entry-not-a-mapping"),
        pytest.param("wrong2.json", "cells.a is not a manifest entry", id="inputs-not-a-mapping"),
        pytest.param("list.json", "not an rbln-build manifest", id="not-a-mapping"),
        # a folder is read as the release or build folder holding release.json or manifest.json
        pytest.param("folder", "folder/manifest.json: cannot read it (No such file or directory)", id="folder"),
        pytest.param("loop1", "Too many levels of symbolic links", id="symlink-loop"),
        pytest.param("afile/x", "Not a directory", id="under-a-file"),
        pytest.param("/dev/zero", "is not a regular file", id="dev-zero"),
        pytest.param("x" * 300, "File name too long", id="name-too-long"),
    ],
)
def test_diff_on_hostile_paths_and_documents(hostile: Path, path: str, says: str) -> None:
    code, _, err = run_cli(["diff", path, "list.json"], hostile)
    assert says in one_line_error(code, err, "rbln-build diff: ")


def test_documents_are_read_with_a_size_cap(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2000)
    with pytest.raises(InputError, match="over the size limit of 1,000 bytes"):
        _documents.load_json(big, limit=1000)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(InputError, match="not a regular file"):  # never blocks on a FIFO with no writer
        _documents.read_document(fifo)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("target", "says"),
    [
        pytest.param("afile/sub", "Not a directory", id="under-a-file"),
        pytest.param("afile", "is not a folder", id="a-file"),
        pytest.param("loop1", "cannot write the project", id="symlink-loop"),
        pytest.param("/proc/x", "cannot write the project", id="proc"),
    ],
)
def test_init_on_hostile_paths(hostile: Path, target: str, says: str) -> None:
    code, _, err = run_cli(["init", target], hostile)
    assert says in one_line_error(code, err, "rbln-build init: ")
    assert not (hostile / "afile").is_dir()


def test_report_on_hostile_build_dirs(hostile: Path) -> None:
    for build_dir in ("afile", "loop1", "folder"):
        code, _, err = run_cli(["report", f"build_dir={build_dir}"], hostile)
        one_line_error(code, err, "rbln-build report: ")
    bad = hostile / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("[" * 5000)
    code, _, err = run_cli(["report", "build_dir=bad"], hostile)
    assert "nested deeper" in one_line_error(code, err, "rbln-build report: ")


def test_report_never_follows_a_forged_compile_key(tmp_path: Path) -> None:
    """A manifest's compile_key becomes a path under cache/compile only if it is a sha256 digest."""
    from rbln_build.reporting._data import _read_compile

    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "entry.json").write_text('{"key": "../../../secret"}')
    meta, report, problem = _read_compile(tmp_path / "build", "../../../secret")
    assert meta is None and report is None and problem is not None and "not a sha256 digest" in problem


def test_status_and_gc_on_a_hostile_manifest(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / "manifest.json").write_text('{"cells": {"x": {"inputs": {"toolchain": [1]}, "cell": 5}}}')
    args = ["matrix=plans", "model=qwen3_8b", "device=rebel100", "build_dir=build"]
    code, out, err = run_cli(["status", *args], tmp_path)
    assert code == 1 and "Traceback" not in err and "would compile" in out  # the damaged entry counts as absent
    (build / "manifest.json").write_text("[" * 5000)
    code, _, err = run_cli(["gc", "--dry-run", *args], tmp_path)
    assert "nested deeper" in one_line_error(code, err, "rbln-build gc: ")
    (build / "manifest.json").write_text('{"cells": {"x": 1}}')
    code, _, err = run_cli(["gc", "--dry-run", *args], tmp_path)
    assert "not an rbln-build manifest" in one_line_error(code, err, "rbln-build gc: ")


@pytest.mark.parametrize(
    ("document", "says"),
    [
        pytest.param("[" * 5000, "nested deeper", id="deep"),
        pytest.param('{"cells": []}', "not an rbln-build manifest", id="cells-a-list"),
        pytest.param('{"cells": {"c": 1}}', "no cell 'c'", id="cell-not-a-mapping"),
        pytest.param('{"cells": {"c": {"artifact": {"path": "loop1"}}}}', "cannot be resolved", id="loop"),
        pytest.param('{"cells": {"c": {"artifact": {"path": "afile/x"}}}}', "unreadable cache entry", id="a-file"),
    ],
)
def test_run_manifest_on_hostile_documents(hostile: Path, document: str, says: str) -> None:
    from rbln_build.run import main as run_main

    (hostile / "m.json").write_text(document)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_main(["--manifest", str(hostile / "m.json"), "c", "--prompt-ids", "1"])
    assert code == 2 and len(err.getvalue().strip().splitlines()) == 1 and says in err.getvalue()


@pytest.mark.parametrize(
    ("name", "says"),
    [("x" * 300, "File name too long"), ("a/" + "y" * 300 + "/b", "not a directory")],
    ids=["long-name", "long-part-below-a-missing-folder"],
)
def test_run_on_a_name_too_long_for_the_file_system_is_an_input_error(tmp_path: Path, name: str, says: str) -> None:
    # found by the slow fuzz (test_every_subcommand_on_hostile_input_many): a 300-character cell name
    # was "internal error ... File name too long" (exit 3)
    from rbln_build.run import main as run_main

    err = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stderr(err):
            code = run_main([name, "--prompt-ids", "1"])
    finally:
        os.chdir(cwd)
    assert code == 2, err.getvalue()
    assert len(err.getvalue().strip().splitlines()) == 1 and says in err.getvalue()


def test_a_bug_in_a_subcommand_is_exit_3_with_its_traceback_in_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rbln_build.inspection import _diff

    def broken(argv: list[str]) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(_diff, "main", broken)
    code, _, err = run_cli(["diff", "a", "b"], tmp_path)
    line = one_line_error(code, err, "rbln-build: internal error: ZeroDivisionError: a bug", expected=3)
    assert "the traceback is in" in line


@pytest.mark.parametrize(
    ("override", "says"),
    [
        pytest.param("jobs=10000000000", "jobs: expected a positive number", id="jobs"),
        pytest.param("executor.max_retries=100000000000", "executor.max_retries", id="retries"),
        pytest.param("build_dir=" + "x" * 300, "over the file-system limit of 255", id="long-name"),
        pytest.param("build_dir=" + "/".join(["y" * 200] * 20), "over the limit of 3072", id="long-path"),
        pytest.param("build_dir=loop1/x", "build_dir:", id="under-a-loop"),
    ],
)
def test_numbers_and_build_dirs_that_were_internal_errors(hostile: Path, override: str, says: str) -> None:
    code, _, err = run_cli(["matrix=plans", "model=qwen3_8b", "device=rebel100", override], hostile)
    assert says in one_line_error(code, err, "rbln-build: ")
    assert not (hostile / "build").exists()


# -- 2. the same limits everywhere a number enters ---------------------------------------------------


def test_deployment_counts_have_the_matrix_limits() -> None:
    for override, says in (
        ("deployment.models.0.batch_size=1000000000", "deployment.models[0].batch_size: 1000000000 is over"),
        ("deployment.models.0.max_seq_len=4000000", "deployment.models[0].max_seq_len: 4000000 is over"),
        ("deployment.models.0.min_blocks=2000000", "deployment.models[0].min_blocks: 2000000 is over"),
        ("deployment.serve.port=70000", "deployment.serve.port: 70000 is over"),
    ):
        with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
            compose_settings(["deployment=tiny_pair", override])


def test_jsonl_bounds_every_count_and_keeps_answering() -> None:
    lines = [
        {**TEMPLATE, "num_devices": 10**9},
        {**TEMPLATE, "memory_budget": None, "kvcache_num_blocks": 2**60},
        {**TEMPLATE, "batch_size": 10**6},
        {**TEMPLATE, "current_blocks": 2**40},
        {**TEMPLATE, "alloc": {"prefill": {"weights": [[1] * 200]}}},  # 200 chiplets on a 1-chiplet NPU
        TEMPLATE,
    ]
    data = "\n".join(json.dumps(line) for line in lines) + "\n" + "[" * (5 << 20) + "\n" + json.dumps(TEMPLATE)
    out = io.StringIO()
    assert estimate_main([], stdin=io.BytesIO(data.encode()), stdout=out) == 0
    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["line"] for r in results] == list(range(1, 9))
    assert [r["error_kind"] for r in results] == [
        "invalid_request",
        "invalid_request",
        "invalid_request",
        "invalid_request",
        "invalid_report",
        None,
        "invalid_request",
        None,
    ]
    assert "`num_devices` is 1000000000, over the limit of 64" in results[0]["error"]
    assert "`kvcache_num_blocks` is 1152921504606846976, over the limit" in results[1]["error"]
    assert "covers 200 chiplets per device" in results[4]["error"] and results[4]["breakdown"] is None
    assert "over the limit of 4,194,304" in results[6]["error"]
    assert results[5]["kvcache_num_blocks"] == results[7]["kvcache_num_blocks"] == 36


def test_no_report_shape_gives_negative_dram() -> None:
    from rbln_build.estimator import AllocationReport, Request, estimate

    for chiplets in range(1, 300, 7):
        report = AllocationReport.from_json({"alloc": {"p": {"w": [[1] * chiplets]}}, "kv_tensors": {}})
        result = estimate(Request(npu="RBLN-CA25", max_seq_len=1024), report)
        breakdown = result.breakdown
        if breakdown is not None:
            assert breakdown.available_bytes > 0 and breakdown.budget_per_chiplet > 0
        else:
            assert result.error_kind == "invalid_report"


@pytest.mark.parametrize(
    ("name", "args", "says"),
    [
        pytest.param("bad.", [], "not a valid name", id="trailing-dot"),
        pytest.param("x" * 65, [], "at most 64 characters", id="65-chars"),
        pytest.param("ok", ["--max-seq-len", "-5"], "--max-seq-len: expected a positive integer", id="negative-seq"),
        pytest.param("ok", ["--max-seq-len", "4000000"], "--max-seq-len: 4000000 is over", id="huge-seq"),
        pytest.param("ok", ["--batch-size", "0"], "--batch-size: expected a positive integer", id="zero-batch"),
        pytest.param("ok", ["--max-seq-len"], "expected one argument", id="argparse"),
    ],
)
def test_recipe_add_refuses_what_the_build_refuses(tmp_path: Path, name: str, args: list[str], says: str) -> None:
    source = checkpoint(tmp_path / "ck")
    code, _, err = run_cli(["recipe", "add", name, "--from", str(source), "--to", "recipes", *args], tmp_path)
    assert says in one_line_error(code, err, "rbln-build recipe: ")
    assert not (tmp_path / "recipes").exists()


def _rewrite_offsets(path: Path, edit: Any) -> None:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    edit(header)
    new = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n :])


def _names(header: dict[str, Any]) -> list[str]:
    return sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        pytest.param(
            lambda h: h[_names(h)[0]].update(data_offsets=[-64, h[_names(h)[0]]["data_offsets"][1]]),
            "expected [begin, end] with 0 <= begin <= end",
            id="negative",
        ),
        pytest.param(
            lambda h: h[_names(h)[1]].update(
                data_offsets=[h[_names(h)[1]]["data_offsets"][0] - 4, h[_names(h)[1]]["data_offsets"][1] - 4]
            ),
            "overlaps the previous tensor",
            id="overlap",
        ),
        pytest.param(lambda h: h[_names(h)[0]].update(shape=[3, 3]), "needs 36", id="size-not-shape"),
    ],
)
def test_safetensors_offsets_are_checked_by_recipe_add_and_the_build(tmp_path: Path, edit: Any, says: str) -> None:
    source = checkpoint(tmp_path / "ck")
    _rewrite_offsets(source / "model.safetensors", edit)
    code, _, err = run_cli(["recipe", "add", "mine", "--from", str(source), "--to", "recipes"], tmp_path)
    assert says in one_line_error(code, err, "rbln-build recipe: ")
    assert not (tmp_path / "recipes").exists()
    recipe = tmp_path / "r" / "mine"  # the build refuses the same checkpoint as a recipe error
    recipe.mkdir(parents=True)
    (recipe / "config.json").write_text(json.dumps(CONFIG))
    (recipe / "recipe.yaml").write_text(f"weights: {{path: {source}}}\nbuild: {{max_seq_len: 64}}\n")
    with pytest.raises(RecipeError, match=r"data_offsets|overlaps|needs 36"):
        load_recipe("mine", tmp_path / "r")


def test_yaml_alias_bombs_are_refused_before_composition(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    scaffold(root)
    levels = "".join(f"x{i + 1}: &a{i + 1} [" + ",".join([f"*a{i}"] * 10) + "]\n" for i in range(9))
    (root / "conf" / "matrix" / "bomb.yaml").write_text("x0: &a0 [1,1,1,1,1,1,1,1,1,1]\n" + levels)
    started = time.monotonic()
    code, _, err = run_cli(["matrix=bomb"], root)
    assert "once its aliases (*name) are expanded" in one_line_error(code, err, "rbln-build: ")
    assert time.monotonic() - started < 60
    recipe = tmp_path / "recipes" / "r"  # a recipe.yaml, read by the recipe loader
    recipe.mkdir(parents=True)
    (recipe / "config.json").write_text(json.dumps(CONFIG))
    (recipe / "recipe.yaml").write_text("build: {max_seq_len: 64}\nsource: &s0 {a: 1}\n" + levels.replace("a0", "s0"))
    with pytest.raises(RecipeError, match="aliases"):
        load_recipe("r", tmp_path / "recipes")


def test_remote_tar_must_be_uncompressed_and_no_bigger_than_itself(tmp_path: Path) -> None:
    entry = tmp_path / "entry"
    (entry / "files").mkdir(parents=True)
    (entry / "files" / "zeros.bin").write_bytes(bytes(1 << 20))
    (entry / "entry.json").write_text(json.dumps({"key": "k", "schema": 1, "meta": {}}))
    plain = tmp_path / "entry.tar"
    with tarfile.open(plain, "w") as tar:
        tar.add(entry / "entry.json", "entry.json")
        tar.add(entry / "files", "files")
    packed = tmp_path / "entry.tar.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert len(packed.read_bytes()) < 10_000  # 1 MiB of zeros compresses to a few kilobytes
    dest = tmp_path / "out"
    assert _unpack(packed, dest, "k") is None
    assert not dest.exists() or not any(dest.rglob("*.bin"))  # refused before anything was decompressed


def test_a_remote_pointer_is_read_with_a_size_limit(tmp_path: Path) -> None:
    key = "a" * 64
    remote = tmp_path / "remote"
    (remote / "compile").mkdir(parents=True)
    (remote / "compile" / key).write_bytes(b'{"blob": "' + b"b" * (10 << 20) + b'"}')
    warnings: list[str] = []
    store = RemoteStore(tmp_path / "cache", f"file://{remote}", warn=warnings.append)
    assert store.lookup("compile", key) is None
    assert any("its pointer is unreadable (over 4096 bytes)" in w for w in warnings), warnings


# -- 3. failures told truthfully -------------------------------------------------------------------


def test_unwritable_links_are_failed_cells_in_manifest_and_summary(tmp_path: Path) -> None:
    from rbln_build.colocation import expand_all
    from rbln_build.pipeline._tasks import BuildRun

    build = tmp_path / "build"
    build.mkdir()
    (build / "artifacts").write_text("a file where the links go")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RBLN_BUILD_CACHE", str(build / "cache"))
        _, cells = expand_all(
            [compose_settings(["matrix=plans", "model=qwen3_8b", "device=rebel100", f"build_dir={build}"])]
        )
        run = BuildRun(build, cells, progress=False, out=io.StringIO())
        run.run()
        summary = run.summary()
    assert run.output_error is not None
    manifest = json.loads((build / "manifest.json").read_text())["cells"]
    assert all(e["artifact"] is None for e in manifest.values())  # names no link that does not exist
    assert {e["error_kind"] for e in manifest.values()} == {"output_failed"}
    on_disk = json.loads((build / "summary.json").read_text())
    assert on_disk["failed"] == summary["failed"] == 2 and sorted(on_disk["failed_cells"]) == sorted(manifest)


def test_unwritable_links_with_workers_give_the_manifest_and_summary_of_one_process(tmp_path: Path) -> None:
    # With workers the publish step joins the lines they rendered and makes the links while it makes
    # the entries; a link that cannot be written must fail its cell exactly as without them.
    from rbln_build.colocation import expand_all
    from rbln_build.config import Scale
    from rbln_build.pipeline._tasks import BuildRun

    out = {}
    for jobs in (1, 2):
        build = tmp_path / f"jobs{jobs}"
        build.mkdir()
        (build / "artifacts").write_text("a file where the links go")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("RBLN_BUILD_CACHE", str(tmp_path / "inventory"))
            _, cells = expand_all([compose_settings(["matrix=plans", f"build_dir={build}"])])
            run = BuildRun(build, cells, progress=False, out=io.StringIO(), scale=Scale(jobs=jobs))
            run.run()
            run.summary()
        assert run.output_error is not None and "artifacts" in run.output_error
        assert bool(run.parallel and run.parallel.lines) == (jobs == 2)  # the workers' lines were the ones used
        # the same but for the build dir's name, which the link errors give, and summary.json's
        # seconds (each compile's and each cell's cost: what the run took, never compared)
        summary = json.loads((build / "summary.json").read_text())
        for timing in ("compiles", "cell_cost_s"):
            assert summary.pop(timing) is not None
        out[jobs] = (
            (build / "manifest.json").read_text().replace(str(build), "<build>"),
            json.dumps(summary, sort_keys=True).replace(str(build), "<build>"),
        )
    assert out[1] == out[2]
    cells = json.loads(out[2][0])["cells"]
    assert {e["error_kind"] for e in cells.values() if e["status"] == "failed"} == {"output_failed"}
    assert all(e["artifact"] is None for e in cells.values()) and json.loads(out[2][1])["failed"] == 7


# -- 4. projects -----------------------------------------------------------------------------------


def _groups(text: str) -> set[str]:
    defaults = yaml.safe_load(text)["defaults"]
    return {next(iter(d)) for d in defaults if isinstance(d, dict) and not next(iter(d)).startswith("override")}


def test_init_root_config_has_every_group_of_the_shipped_one(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    scaffold(root)
    shipped = (shipped_dir("conf") / "config.yaml").read_text()
    assert _groups(shipped) <= _groups((root / "conf" / "config.yaml").read_text())
    project = load_project(root)
    assert compose_settings(["deployment=tiny_pair"], project=project).deployment is not None
    import importlib.util

    if importlib.util.find_spec("ray") is not None:
        assert compose_settings(["executor=ray"], project=project).scale.executor == "ray"
    else:  # the group is there; without the extra, choosing it is the config error naming the extra
        with pytest.raises(ConfigError, match=r"rbln-build\[ray\]"):
            compose_settings(["executor=ray"], project=project)
    keys = set(yaml.safe_load(shipped)) - {"defaults", "hydra"}
    assert keys <= set(yaml.safe_load((root / "conf" / "config.yaml").read_text()))


def test_expect_failure_naming_no_cell_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"matrix.expect_failure\[0\].cell: 'nope' names no cell of the matrix"):
        expand(compose_settings(["matrix=plans", "matrix.expect_failure=[{cell:nope,kind:x}]"]), TOOLCHAIN)
    # a narrowed run holds part of the matrix: the shipped entries naming other cells stand
    assert expand(compose_settings(["matrix=plans", "model=llama3_2_1b"]), TOOLCHAIN)


def test_an_empty_recipe_yaml_is_a_recipe_error(tmp_path: Path) -> None:
    shutil.copytree(DEFAULT_RECIPES_DIR / "tiny_llama", tmp_path / "tiny_llama")
    (tmp_path / "tiny_llama" / "recipe.yaml").write_text("")
    with pytest.raises(RecipeError, match="recipe.yaml: is empty"):
        load_recipe("tiny_llama", tmp_path)
    code, _, err = run_cli(["matrix=tiny", f"recipes_dir={tmp_path}", "build_dir=b"], tmp_path)
    assert "is empty" in one_line_error(code, err, "rbln-build: ") and not (tmp_path / "b").exists()


# -- 5. byte budgets in any script's digits, as optimum-rbln 0.12.0 reads them ------------------------

DIGITS = "0123456789" + "٠١٢٣٤٥٦٧٨٩" + "०१२३४५६७८९" + "０１２３４５６７８９" + "𝟘𝟙𝟚𝟛𝟜𝟝𝟞𝟟𝟠𝟡" + "²"
SPACES = [" ", "\t", "\u2003", "\u3000", ""]
UNITS = ["", "B", "b", "KB", "kb", "Mb", "GB", "tB", "\u212aB", "PB", "G"]


@needs_optimum_rbln
@settings(max_examples=300, deadline=None)
@given(
    digits=st.text(alphabet=DIGITS, min_size=0, max_size=6),
    before=st.sampled_from(SPACES),
    between=st.sampled_from(SPACES),
    unit=st.sampled_from(UNITS),
)
def test_byte_budgets_match_the_reference_in_any_digits(digits: str, before: str, between: str, unit: str) -> None:
    from rbln_build.errors import EstimateError
    from rbln_build.estimator._budget import format_budget, parse_budget

    with pytest.MonkeyPatch.context() as mp:
        sdk_on_path(mp)
    from optimum.rbln.utils.runtime_utils import parse_byte_size

    text = f"{before}{digits}{between}{unit}{before}"
    try:
        reference: int | None = parse_byte_size(text)
    except (ValueError, KeyError):  # KeyError: 0.12.0's unit lookup for what only Unicode case folding matched
        reference = None
    try:
        ours: int | None = parse_budget(text).nbytes
    except EstimateError:
        ours = None
    assert ours == reference, text
    if ours is not None:
        assert format_budget(text).isascii()


def test_internal_errors_outside_a_build_dir_keep_a_bounded_folder_of_tracebacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fuzz run left 271 traceback files loose in the temp dir (issue 36): they go to this user's
    folder there, which keeps the newest KEPT_ERRORS; the error line names the newest."""
    import tempfile

    from rbln_build.commands import _guard
    from rbln_build.inspection import _diff

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def broken(argv: list[str]) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(_diff, "main", broken)
    lines = [one_line_error(*run_cli(["diff", "a", "b"], tmp_path)[::2], "rbln-build: internal", 3) for _ in range(25)]
    folder = tmp_path / f"rbln-build-errors-{os.getuid()}"
    files = sorted(folder.iterdir())
    assert len(files) == _guard.KEPT_ERRORS and oct(folder.stat().st_mode & 0o777) == "0o700"
    assert f"the traceback is in {files[-1]}" in lines[-1] and "ZeroDivisionError: a bug" in files[-1].read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("rbln-build-error-")]  # nothing loose
