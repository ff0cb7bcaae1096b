"""A project is a directory of configs: found from the current folder upward (or --project /
RBLN_BUILD_PROJECT), its conf/ and recipes/ layered over the shipped ones; `rbln-build init`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rbln_build.config._config import compose_settings
from rbln_build.config._matrix import expand
from rbln_build.config._project import MARKER, PROJECT_ENV, find_project, split_project_arg
from rbln_build.errors import ConfigError, RecipeError
from rbln_build.memory._shipped import shipped_dir
from rbln_build.scaffold._init import scaffold

TOOLCHAIN = {"torch": "t", "transformers": "t", "format": "1"}


def make_project(root: Path, files: dict[str, str]) -> Path:
    (root / MARKER).parent.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text("# test project\n")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_found_from_a_subfolder_and_paths_are_relative_to_its_root(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(PROJECT_ENV, raising=False)
    root = make_project(tmp_path / "proj", {"conf/matrix/mine.yaml": "models: [qwen3_8b]\ndevices: [rebel100]\n"})
    deep = root / "a" / "b"
    deep.mkdir(parents=True)
    project = find_project(cwd=deep)
    assert project.root == root.resolve() and project.marker == root.resolve() / MARKER
    assert project.conf_dirs == (root.resolve() / "conf", shipped_dir("conf").resolve())
    assert project.recipe_dirs == (shipped_dir("recipes").resolve(),)  # no recipes/ in this project
    settings = compose_settings(["matrix=mine"], project=project)
    assert settings.build_dir == root.resolve() / "build"


def test_no_marker_means_the_shipped_configs_relative_to_cwd(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(PROJECT_ENV, raising=False)
    project = find_project(cwd=tmp_path)
    assert project.marker is None and project.root == tmp_path.resolve()
    assert project.conf_dirs == (shipped_dir("conf"),)


def test_explicit_project_and_env(tmp_path: Path, monkeypatch) -> None:
    root = make_project(tmp_path / "p", {})
    monkeypatch.setenv(PROJECT_ENV, str(root))
    assert find_project(cwd=tmp_path).root == root.resolve()
    other = make_project(tmp_path / "q", {})
    assert find_project(str(other), cwd=tmp_path).root == other.resolve()  # --project wins over the env
    assert split_project_arg(["budget=0.3", "--project", "x", "-m"]) == ("x", ["budget=0.3", "-m"])
    assert split_project_arg(["--project=y"]) == ("y", [])
    with pytest.raises(ConfigError, match="not an rbln-build project"):
        find_project(str(tmp_path / "nothing"), cwd=tmp_path)


def test_bad_marker_is_a_config_error_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / MARKER).write_text("confs: conf\n")
    with pytest.raises(ConfigError, match=r"rbln-build.yaml: unknown key\(s\) confs"):
        find_project(str(root))


def test_project_files_win_and_shipped_ones_stay_available(tmp_path: Path) -> None:
    recipe = shipped_dir("recipes") / "llama3_2_1b"
    root = make_project(
        tmp_path / "p",
        {
            # a project device of the shipped name wins; a shipped model and device stay usable
            "conf/device/rebel100.yaml": "npu: RBLN-CR03\nnum_devices: 2\n",
            "conf/matrix/mine.yaml": "models: [my_llama, qwen3_8b]\ndevices: [rebel100, atom_max_x4]\nbudgets: [0.5]\n",
            "conf/model/my_llama.yaml": "recipe: llama3_2_1b\nbatch_size: 2\n",
            "recipes/llama3_2_1b/config.json": (recipe / "config.json").read_text(),
            "recipes/llama3_2_1b/recipe.yaml": (recipe / "recipe.yaml").read_text() + "# the project's copy\n",
        },
    )
    project = find_project(str(root))
    settings = compose_settings(["matrix=mine"], project=project)
    assert [d.num_devices for d in settings.matrix.devices] == [2, 4]  # project rebel100, shipped atom_max_x4
    assert [m.name for m in settings.matrix.models] == ["my_llama", "qwen3_8b"]
    cells = {c.id: c for c in expand(settings, TOOLCHAIN)}
    mine = cells["my_llama.rebel100.b0.5"]
    assert mine.recipe.directory == root.resolve() / "recipes" / "llama3_2_1b"  # project recipe first
    assert mine.option("batch_size") == 2
    assert cells["qwen3_8b.rebel100.b0.5"].recipe.directory == shipped_dir("recipes") / "qwen3_8b"
    # the `device=` group override also sees the project's file first
    narrowed = compose_settings(["matrix=mine", "device=rebel100"], project=project)
    assert [d.num_devices for d in narrowed.matrix.devices] == [2]
    with pytest.raises(ConfigError, match=r"matrix.models\[0\]: unknown model 'nope'"):
        compose_settings(["matrix=mine", "matrix.models=[nope]"], project=project)


def test_a_missing_recipe_names_every_place_searched(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", {"conf/model/ghost.yaml": "recipe: ghost\n", "recipes/.keep": ""})
    settings = compose_settings(["matrix=plans", "model=ghost"], project=find_project(str(root)))
    with pytest.raises(RecipeError) as info:
        expand(settings, TOOLCHAIN)
    assert str(root.resolve() / "recipes" / "ghost") in str(info.value)
    assert str(shipped_dir("recipes") / "ghost") in str(info.value)


def test_init_scaffolds_a_composable_project_and_never_overwrites(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    written = scaffold(root)
    assert {p.relative_to(root).as_posix() for p in written} == {
        MARKER,
        ".gitignore",
        "conf/config.yaml",
        "conf/matrix/main.yaml",
        "conf/device/my_device.yaml",
        "conf/model/my_llama.yaml",
        "recipes/my_llama/recipe.yaml",
        "recipes/my_llama/config.json",
    }
    settings = compose_settings([], project=find_project(str(root)))
    cells = expand(settings, TOOLCHAIN)
    assert [c.id for c in cells] == [
        "my_llama.my_device.b0.3",
        "my_llama.my_device.b0.5",
        "my_llama.rebel100.b0.3",
        "my_llama.rebel100.b0.5",
    ]
    assert cells[0].recipe.has_weights and cells[0].device.num_devices == 2
    before = {p: p.read_bytes() for p in written}
    (root / "conf" / "matrix" / "main.yaml").write_text("# mine now\n")
    with pytest.raises(ConfigError, match="never overwrites"):
        scaffold(root)
    assert (root / "conf" / "matrix" / "main.yaml").read_text() == "# mine now\n"
    assert all(p.read_bytes() == data for p, data in before.items() if p.name != "main.yaml")
    other = tmp_path / "other"
    other.mkdir()
    (other / ".gitignore").write_text("keep\n")
    with pytest.raises(ConfigError, match=r"\.gitignore"):
        scaffold(other)
    assert sorted(p.name for p in other.iterdir()) == [".gitignore"]  # nothing written at all


def test_the_manifest_has_no_absolute_path(tmp_path: Path) -> None:
    from rbln_build.pipeline._manifest import entry_for

    root = make_project(tmp_path / "p", {})
    shutil.copytree(shipped_dir("recipes") / "qwen3_8b", root / "recipes" / "qwen3_8b")
    cells = expand(
        compose_settings(["matrix=plans", "matrix.expect_failure=[]"], project=find_project(str(root))), TOOLCHAIN
    )
    text = repr([entry_for(c, None) for c in cells])
    assert str(tmp_path) not in text and str(shipped_dir("recipes")) not in text


def test_the_scaffolds_gitignore_keeps_private_keys_out_of_a_commit(tmp_path: Path) -> None:
    """The signing walkthrough's key, had it been written into the project (issue 36), is not
    committed by ``git add -A``: git itself reads the scaffold's .gitignore."""
    import subprocess

    root = tmp_path / "proj"
    scaffold(root)
    for name in ("release.key", "keys/ci.pem", "release.pub"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("-----BEGIN PRIVATE KEY-----\n")
    git = ["git", "-c", "init.defaultBranch=main", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    staged = subprocess.run([*git, "ls-files"], check=True, capture_output=True, text=True).stdout.split()
    assert "release.key" not in staged and "keys/ci.pem" not in staged
    assert "release.pub" in staged and "recipes/my_llama/recipe.yaml" in staged  # the public key is shared
