"""Regression tests for issue 9 (hardening), one group per numbered item of the issue.

Most run in process on a small plans build (one compile, two cells); a few run the real CLI where
the exit status and stderr are the point. The traversal and forged-result tests prove that a
directory outside the build directory survives.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rbln_build.colocation import expand_all
from rbln_build.config._config import compose_settings
from rbln_build.config._matrix import expand
from rbln_build.errors import ConfigError, RecipeError
from rbln_build.inspection._jsonl import main as estimate_main
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe
from rbln_build.pipeline._manifest import entry_for, status_of
from rbln_build.pipeline._publish import MANIFEST_FILE, recover
from rbln_build.pipeline._tasks import STATE_FILE, BuildRun
from rbln_build.store._store import Store

SMALL = ["matrix=plans", "model=qwen3_8b", "device=rebel100"]  # one compile, two cells, two artifacts
TOOLCHAIN = {"torch": "t", "transformers": "t", "format": "1"}


def small_build(build: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str] | None = None) -> BuildRun:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(build / "cache"))  # no process-wide side effect
    _, cells = expand_all([compose_settings([*SMALL, *(extra or []), f"build_dir={build}"])])
    run = BuildRun(build, cells, progress=False, out=io.StringIO())
    run.run()
    run.summary()
    return run


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clean small build; tests copy it."""
    build = tmp_path_factory.mktemp("clean") / "build"
    with pytest.MonkeyPatch.context() as mp:
        run = small_build(build, mp)
    assert run.output_error is None and run.entries and all(e["status"] == "ok" for e in run.entries)
    return build


def copy(clean: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "work" / "build"
    shutil.copytree(clean, dst, symlinks=True)
    return dst


def victim(tmp_path: Path) -> Path:
    """A directory of user data outside the build directory."""
    v = tmp_path / "victim"
    v.mkdir(exist_ok=True)
    (v / "data.txt").write_text("keep me")
    return v


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )


# -- 1. a cache result can delete any directory ----------------------------------------------------


def test_a_cache_kind_linked_elsewhere_is_never_emptied(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    entry = outside / ("a" * 64)
    entry.mkdir(parents=True)
    (entry / "data.txt").write_text("keep me")  # no entry.json: a store would discard it as incomplete
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "artifacts").symlink_to(outside)
    warnings: list[str] = []
    assert Store(tmp_path / "cache", warn=warnings.append).lookup("artifacts", "a" * 64) is None
    assert (entry / "data.txt").read_text() == "keep me" and any("left in place" in w for w in warnings)


def test_forged_artifact_key_never_becomes_a_path(clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = copy(clean, tmp_path)
    outside = victim(tmp_path / "work")
    store = Store(build / "cache")
    manifest = json.loads((build / MANIFEST_FILE).read_text())["cells"]
    for entry in manifest.values():  # a consistent forgery: the record's self-hash is recomputed
        body = store.load_record("results", entry["cell_key"])
        assert body is not None
        body["artifact_key"] = "../../../victim"
        store.save_record("results", entry["cell_key"], body)
    run = small_build(build, monkeypatch)
    assert (outside / "data.txt").read_text() == "keep me"
    assert run.output_error is None
    assert (build / MANIFEST_FILE).read_bytes() == (clean / MANIFEST_FILE).read_bytes()


# -- 2. names are paths ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "key"),
    [
        pytest.param("matrix.models=[../../../x/llama]", "matrix.models[0]", id="matrix-model"),
        pytest.param("matrix.devices=[a/b]", "matrix.devices[0]", id="matrix-device"),
        pytest.param("matrix.include=[{models:[.hidden]}]", "matrix.include[0].models[0]", id="include-model"),
        pytest.param("model.recipe=../qwen3_8b", "recipe", id="recipe"),
        pytest.param("matrix.models=[a..b]", "matrix.models[0]", id="dot-dot"),
    ],
)
def test_names_that_are_not_identifiers_are_config_errors(override: str, key: str) -> None:
    extra = ["model=qwen3_8b"] if override.startswith("model.") else []
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        compose_settings(["matrix=plans", *extra, override])


def test_model_choice_with_a_path_is_exit_2_and_touches_nothing(tmp_path: Path) -> None:
    outside = victim(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    proc = cli(["matrix=plans", "model=../../victim/llama"], cwd=work)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert list(work.iterdir()) == [] and (outside / "data.txt").read_text() == "keep me"


def test_a_users_folder_in_artifacts_is_named_never_deleted(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = copy(clean, tmp_path)
    link = next((build / "artifacts").iterdir())
    link.unlink()
    link.mkdir()
    (link / "mine.txt").write_text("keep")
    run = small_build(build, monkeypatch)
    assert run.output_error is not None and link.name in run.output_error
    assert (link / "mine.txt").read_text() == "keep"


def test_a_users_symlink_in_artifacts_is_named_never_replaced(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = copy(clean, tmp_path)
    outside = victim(tmp_path)
    link = next((build / "artifacts").iterdir())
    link.unlink()
    link.symlink_to(outside)
    run = small_build(build, monkeypatch)
    assert run.output_error is not None and "did not make" in run.output_error
    assert os.readlink(link) == str(outside) and (outside / "data.txt").read_text() == "keep me"


def test_artifacts_linked_outside_the_build_dir_is_refused(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = copy(clean, tmp_path)
    outside = victim(tmp_path)
    shutil.rmtree(build / "artifacts")
    (build / "artifacts").symlink_to(outside)
    run = small_build(build, monkeypatch)
    assert run.output_error is not None and "outside" in run.output_error
    assert sorted(p.name for p in outside.iterdir()) == ["data.txt"]


# -- 4. failures reported as success ---------------------------------------------------------------


def test_a_cell_id_too_long_for_a_file_name_is_a_config_error() -> None:
    settings = compose_settings(SMALL)
    long_model = replace(settings.matrix.models[0], name="m" * 64)
    long_device = replace(settings.matrix.devices[0], name="d" * 64)
    matrix = replace(
        settings.matrix,
        models=(long_model,),
        devices=(long_device,),
        budgets=("1" * 60 + "GB",),
        batch_sizes=(4096,),
        max_seq_lens=(8192,),
        kvcache_partition_len=8192,
        attn_impl="flash_attn",
    )
    with pytest.raises(ConfigError, match="over the limit of 200"):
        expand(replace(settings, matrix=matrix), TOOLCHAIN)


def test_artifacts_being_a_file_is_reported_exit_1_without_a_manifest_path(clean: Path, tmp_path: Path) -> None:
    build = copy(clean, tmp_path)
    shutil.rmtree(build / "artifacts")
    (build / "artifacts").write_text("not a folder")
    (build / MANIFEST_FILE).unlink()
    proc = cli([*SMALL, f"build_dir={build}"], cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "could not be written" in proc.stderr and "Manifest:" not in proc.stdout
    assert (build / "artifacts").read_text() == "not a folder"


def test_full_disk_is_a_failure_not_a_success(tmp_path: Path) -> None:
    import resource

    def limit() -> None:  # like `ulimit -f 8`: files stop growing at 8 KiB (Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    build = tmp_path / "build"
    with_expected_failure = ["matrix=plans", "model=qwen3_8b"]  # qwen3_8b.atom_max_x4.b0.3 is declared to fail
    proc = subprocess.run(
        [sys.executable, "-m", "rbln_build.cli", *with_expected_failure, f"build_dir={build}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=limit,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "AssertionError" not in proc.stderr
    assert " 0 failed, " not in proc.stdout
    for line in proc.stdout.splitlines():  # a manifest path is printed only if that manifest was written
        if "Manifest: " in line:
            assert json.loads(Path(line.split("Manifest: ")[1]).read_text())["cells"]


def test_truncated_doit_state_is_moved_aside_and_the_build_goes_on(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = copy(clean, tmp_path)
    state = build / STATE_FILE
    data = state.read_bytes()
    state.write_bytes(data[: len(data) // 3] or b"garbage")
    run = small_build(build, monkeypatch)
    assert any("damaged" in w for w in run.warnings)
    assert (build / (STATE_FILE + ".corrupt")).exists()
    assert (build / MANIFEST_FILE).read_bytes() == (clean / MANIFEST_FILE).read_bytes()
    again = small_build(build, monkeypatch)
    assert again.warnings == [] and again.redone == set()


def test_an_expected_failure_cell_without_a_result_is_failed_not_an_assertion() -> None:
    settings = compose_settings([*SMALL, "matrix.expect_failure=[{cell:qwen3_8b.rebel100.b0.3,kind:x}]"])
    cell = expand(settings, TOOLCHAIN)[0]
    assert cell.expected is not None
    assert status_of(cell, None) == "failed"
    assert entry_for(cell, None)["status"] == "failed"


# -- 5 and 6. bounds, configuration errors ---------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        pytest.param(
            ["device=rebel100", "device.num_devices=1000000000"], "num_devices: 1000000000 is over", id="devices"
        ),
        pytest.param(["matrix.batch_sizes=[100000]"], "matrix.batch_sizes[0]", id="batch"),
        pytest.param(["matrix.max_seq_lens=[1000000000]"], "matrix.max_seq_lens[0]", id="seq"),
        pytest.param(["matrix.kvcache_num_blocks=[1000000000]"], "matrix.kvcache_num_blocks[0]", id="blocks"),
        pytest.param(["matrix.kvcache_partition_len=0"], "matrix.kvcache_partition_len", id="partition-0"),
        pytest.param(["budget='" + "1" * 5000 + "GB'"], "over the limit of 64", id="5000-digit-budget"),
        pytest.param(["matrix.expect_failure=[{cell:x}]"], "matrix.expect_failure[0].kind", id="expect-no-kind"),
        pytest.param(["build_dir=''"], "build_dir: is empty", id="build-dir-empty"),
        pytest.param(["build_dir=/proc/x"], "pseudo file system", id="build-dir-proc"),
    ],
)
def test_bad_values_are_config_errors(overrides: list[str], says: str) -> None:
    try:
        compose_settings(["matrix=plans", *overrides])
    except ConfigError as exc:
        assert says in str(exc)
    except Exception as exc:  # Hydra's own grammar errors (the CLI turns them into one line, exit 2)
        assert type(exc).__module__.startswith(("hydra", "omegaconf")), exc
    else:
        pytest.fail("accepted")


def test_build_dir_that_is_or_is_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    for value, says in (("f", "is a file"), ("f/sub", "is under")):
        with pytest.raises(ConfigError, match=says):
            compose_settings(["matrix=plans", f"build_dir={value}"], cwd=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.fixture
def recipes(tmp_path: Path) -> Path:
    shutil.copytree(DEFAULT_RECIPES_DIR / "tiny_llama", tmp_path / "tiny_llama")
    return tmp_path


@pytest.mark.parametrize(
    ("file", "edit", "says"),
    [
        pytest.param("config.json", lambda c: [c], "expected a JSON object", id="config-is-a-list"),
        pytest.param("config.json", lambda c: {**c, "num_attention_heads": 0}, "num_attention_heads", id="heads-0"),
        pytest.param("config.json", lambda c: {**c, "num_hidden_layers": "abc"}, "num_hidden_layers", id="layers-str"),
        pytest.param("config.json", lambda c: {**c, "num_hidden_layers": 10**9}, "over the limit", id="layers-huge"),
        pytest.param("recipe.yaml", lambda r: {**r, "quantization": "8bit"}, "quantization must be", id="quant-str"),
        pytest.param("recipe.yaml", lambda r: {**r, "dtype": ["bfloat16"]}, "dtype must be", id="dtype-list"),
        pytest.param("recipe.yaml", lambda r: {**r, "source": [1, 2, 3]}, "source must be", id="source-list"),
        pytest.param("recipe.yaml", lambda r: {**r, "build": {"batch_size": "8"}}, "build.batch_size", id="build-str"),
        pytest.param(
            "recipe.yaml",
            lambda r: {**r, "build": {"kvcache_partition_len": 0}},
            "build.kvcache_partition_len",
            id="build-partition-0",
        ),
        pytest.param("recipe.yaml", lambda r: {**r, "build": {"batch_szie": 1}}, "build.batch_szie", id="build-typo"),
    ],
)
def test_malformed_recipes_are_recipe_errors(recipes: Path, file: str, edit: Any, says: str) -> None:
    import yaml

    path = recipes / "tiny_llama" / file
    if file == "config.json":
        path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    else:
        path.write_text(yaml.safe_dump(edit(yaml.safe_load(path.read_text()))))
    with pytest.raises(RecipeError, match=f"{path.name}.*{says}".replace("[", r"\[").replace("]", r"\]")):
        load_recipe("tiny_llama", recipes)


def test_a_recipe_name_with_a_path_is_refused(recipes: Path) -> None:
    with pytest.raises(RecipeError, match="not a valid name"):
        load_recipe("../tiny_llama", recipes / "sub")


def test_multirun_config_error_writes_no_multirun_yaml(tmp_path: Path) -> None:
    proc = cli(["-m", "matrix=plans", "budget=0.3,abc"], cwd=tmp_path)
    assert proc.returncode == 2 and "budget" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


# -- 7. the JSON-lines stream answers every line ---------------------------------------------------


def test_jsonl_answers_every_line() -> None:
    lines = [
        "[" * 100000,
        json.dumps(
            {
                "npu": "RBLN-CA25",
                "max_seq_len": 1024,
                "memory_budget": "1" * 5000,
                "alloc": {"p": {"w": [[1]]}},
                "kv_tensors": {"k": {"can_resize": True, "sizes": [[1]]}},
            }
        ),
        '{"npu": "RBLN-CA25", "max_seq_len": ' + "9" * 5000 + "}",
        json.dumps(
            {
                "npu": "RBLN-CA25",
                "max_seq_len": 1024,
                "memory_budget": "١٠GB",  # read as optimum-rbln 0.12.0 reads it: 10 GiB (issue 20)
                "alloc": {"p": {"w": [[1]]}},
                "kv_tensors": {"k": {"can_resize": True, "sizes": [[1]]}},
            }
        ),
    ]
    out = io.StringIO()
    assert estimate_main([], stdin=io.BytesIO("\n".join(lines).encode()), stdout=out) == 0
    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["line"] for r in results] == [1, 2, 3, 4]
    assert [r["error_kind"] for r in results] == [
        "invalid_request",
        "invalid_budget",
        "invalid_request",
        None,
    ]
    assert results[3]["breakdown"]["budget_bytes"] == 10 * 2**30


# -- 8. leftovers, and a manifest consistent with its links ----------------------------------------


def test_startup_removes_own_leftovers_only(clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = copy(clean, tmp_path)
    (build / ".tmp-manifest.json-123-abcdef01").write_text("{")
    (build / ".tmp-summary.json-123-abcdef01").write_text("{")
    (build / "artifacts" / ".tmp-cell-123").symlink_to(f"../cache/artifacts/{'0' * 64}/files")
    (build / "artifacts" / ".tmp-users-link").symlink_to("/somewhere")  # not one of ours: kept
    (build / "cache" / "inventory").mkdir(exist_ok=True)
    (build / "cache" / "inventory" / "k.json.x1y2.tmp").write_text("{")
    (build / "artifacts" / ".tmp-mine").mkdir()  # a user's folder with a look-alike name: kept
    run = small_build(build, monkeypatch)
    assert run.output_error is None
    left = sorted(p.relative_to(build).as_posix() for p in build.rglob("*tmp*"))
    assert left == ["artifacts/.tmp-mine", "artifacts/.tmp-users-link"]


def test_links_roll_forward_to_the_manifest(clean: Path, tmp_path: Path) -> None:
    build = copy(clean, tmp_path)
    a, b = sorted((build / "artifacts").iterdir())
    target_a = os.readlink(a)
    a.unlink()
    a.symlink_to(os.readlink(b))  # as if killed after the manifest, before re-linking a
    assert recover(build, Store(build / "cache")) == 0  # no interrupted publish recorded: nothing to do
    (build / ".publishing").write_bytes(b"")  # what publish leaves until the links match the manifest
    assert recover(build, Store(build / "cache")) == 1
    assert os.readlink(a) == target_a and not (build / ".publishing").exists()


def test_a_manifest_above_the_document_limit_is_still_the_builds_own(clean: Path, tmp_path: Path) -> None:
    # A sweep of some 30,000 cells writes a manifest above the 64 MiB that a command reads of a user's
    # document. The build's own reads of it must not stop there: publishing compared the old bytes
    # through that limit (so rewrote the manifest on every no-op), and the roll-forward skipped.
    from rbln_build._documents import MAX_DOCUMENT_BYTES
    from rbln_build.pipeline._publish import publish

    build = copy(clean, tmp_path)
    data = json.loads((build / MANIFEST_FILE).read_text())
    pad = {"padding": "x" * (MAX_DOCUMENT_BYTES + 1)}  # stands for 30,000 cells' entries
    data.update(pad)
    (build / MANIFEST_FILE).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    a, b = sorted((build / "artifacts").iterdir())
    target_a = os.readlink(a)
    a.unlink()
    a.symlink_to(os.readlink(b))  # as if killed after the manifest, before re-linking a
    (build / ".publishing").write_bytes(b"")
    assert recover(build, Store(build / "cache")) == 1
    assert os.readlink(a) == target_a and not (build / ".publishing").exists()

    run = small_build(build, pytest.MonkeyPatch())  # the same inputs: same entries
    rows = run.rows(run.cells)
    publish(build, rows, sections=pad)
    written = (build / MANIFEST_FILE).stat()
    assert written.st_size > MAX_DOCUMENT_BYTES
    publish(build, rows, sections=pad)  # nothing changed: the manifest is not written again
    again = (build / MANIFEST_FILE).stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    assert not (build / ".publishing").exists()


def test_recover_ignores_a_hostile_manifest(clean: Path, tmp_path: Path) -> None:
    build = copy(clean, tmp_path)
    outside = victim(tmp_path)
    data = json.loads((build / MANIFEST_FILE).read_text())
    entry = next(iter(data["cells"].values()))
    data["cells"] = {"../../victim": entry, "x": {**entry, "cell_key": "../../victim"}}
    (build / MANIFEST_FILE).write_text(json.dumps(data))
    (build / ".publishing").write_bytes(b"")
    assert recover(build, Store(build / "cache")) == 0
    assert sorted(p.name for p in outside.iterdir()) == ["data.txt"]
