"""A recipe's ``license`` field: a Hub licence id and the licence's text, a file beside recipe.yaml."""

from __future__ import annotations

import shutil

import pytest
import yaml

from rbln_build.errors import RecipeError
from rbln_build.memory._recipes import DEFAULT_RECIPES_DIR, load_recipe


def _recipe(tmp_path, license_value, files=()):
    folder = tmp_path / "lic"
    shutil.copytree(DEFAULT_RECIPES_DIR / "tiny_llama", folder)
    meta = yaml.safe_load((folder / "recipe.yaml").read_text())
    meta["name"] = "lic"
    meta["license"] = license_value
    (folder / "recipe.yaml").write_text(yaml.safe_dump(meta))
    for name, text in files:
        (folder / name).write_text(text)
    return folder


def test_license_id_and_file_are_read_and_hashed(tmp_path):
    _recipe(tmp_path, {"id": "apache-2.0", "file": "LICENSE"}, [("LICENSE", "Apache License 2.0\n")])
    recipe = load_recipe("lic", tmp_path)
    assert (recipe.license_id, recipe.license_file) == ("apache-2.0", "LICENSE")
    before = recipe.content_hash
    (tmp_path / "lic" / "LICENSE").write_text("another text\n")
    assert load_recipe("lic", tmp_path).content_hash != before  # the licence's bytes are part of the recipe


def test_no_license_is_none(tmp_path):
    _recipe(tmp_path, None)
    recipe = load_recipe("lic", tmp_path)
    assert (recipe.license_id, recipe.license_file) == (None, None)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        pytest.param("apache-2.0", "license must be null or {id: apache-2.0, file: LICENSE}", id="not-a-mapping"),
        pytest.param({"spdx": "mit"}, "license must be null or", id="unknown-key"),
        pytest.param({"id": "Apache 2.0"}, "license.id 'Apache 2.0' is not a Hub licence identifier", id="bad-id"),
        pytest.param({"id": "mit", "file": "../LICENSE"}, "license.file: '../LICENSE' is not a file name", id="path"),
        pytest.param({"id": "mit", "file": "LICENSE"}, "license.file: ", id="missing-file"),
    ],
)
def test_bad_license_names_the_key(tmp_path, value, fragment):
    _recipe(tmp_path, value)
    with pytest.raises(RecipeError, match=None) as info:
        load_recipe("lic", tmp_path)
    assert fragment in str(info.value)
    assert "recipe.yaml" in str(info.value)


def test_recipe_add_takes_a_checkpoints_licence_file_and_readme_licence(tmp_path):
    # The checkpoint's LICENSE is copied byte for byte and its README.md front matter's license: becomes
    # the id; a checkpoint with neither gets the recipe it always got (no license key at all).
    from _checkpoints import make_checkpoint

    from rbln_build.scaffold._recipe import add_recipe

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama", seed=1)
    add_recipe("plain", ckpt, tmp_path / "recipes", None, max_seq_len=256)
    plain = yaml.safe_load((tmp_path / "recipes" / "plain" / "recipe.yaml").read_text())
    assert "license" not in plain
    (ckpt / "LICENSE").write_text("the licence text\n")
    (ckpt / "README.md").write_text("---\nlicense: apache-2.0\ntags: [x]\n---\n# model\n")
    add_recipe("lic", ckpt, tmp_path / "recipes", None, max_seq_len=256)
    meta = yaml.safe_load((tmp_path / "recipes" / "lic" / "recipe.yaml").read_text())
    assert meta["license"] == {"id": "apache-2.0", "file": "LICENSE"}
    assert (tmp_path / "recipes" / "lic" / "LICENSE").read_bytes() == (ckpt / "LICENSE").read_bytes()
    recipe = load_recipe("lic", tmp_path / "recipes")
    assert (recipe.license_id, recipe.license_file) == ("apache-2.0", "LICENSE")
    (ckpt / "README.md").write_text("---\nlicense: Apache License 2.0\n---\n")  # not a Hub id: not taken
    add_recipe("odd", ckpt, tmp_path / "recipes", None, max_seq_len=256)
    odd = yaml.safe_load((tmp_path / "recipes" / "odd" / "recipe.yaml").read_text())
    assert odd["license"] == {"id": None, "file": "LICENSE"}


def test_a_recipes_licence_is_in_every_cell_and_a_recipe_without_one_changes_no_record(tmp_path):
    # torch backend, one compile and one cell: the licence file byte for byte, recorded and hashed; the
    # same recipe without a licence has a record without any license key (as before licences existed)
    import json

    from _torch_cells import spec_for

    from rbln_build.backends import get_backend

    records = {}
    for name, value, files in (
        ("lic", {"id": "mit", "file": "LICENSE"}, [("LICENSE", "MIT License\n")]),
        ("nolic", None, []),
    ):
        folder = _recipe(tmp_path / name, value, files)
        spec = spec_for(load_recipe("lic", folder.parent))
        base, cell = tmp_path / name / "base", tmp_path / name / "cell"
        base.mkdir()
        cell.mkdir()
        get_backend("torch").compile(spec, base)
        get_backend("torch").finalize(spec, base, 5, cell)
        records[name] = json.loads((cell / "rbln-build.json").read_text())
        if files:
            assert (cell / "LICENSE").read_text() == "MIT License\n"
    assert records["lic"]["license"] == {"id": "mit", "file": "LICENSE"} and "LICENSE" in records["lic"]["data_files"]
    assert "license" not in records["nolic"] and "base_model" not in records["nolic"]  # tiny_llama is synthetic
    assert set(records["lic"]) - set(records["nolic"]) == {"license"}


def test_a_recipes_language_is_checked_and_carried_into_the_cards_front_matter(tmp_path):
    from huggingface_hub import ModelCard

    from rbln_build.release._card import card_for

    _recipe(tmp_path, None)
    meta = yaml.safe_load((tmp_path / "lic" / "recipe.yaml").read_text())
    assert load_recipe("lic", tmp_path).language == ()  # none named: none claimed
    for bad in ("en", ["English"], ["en", "en"], []):
        (tmp_path / "lic" / "recipe.yaml").write_text(yaml.safe_dump({**meta, "language": bad}))
        with pytest.raises(RecipeError, match=r"recipe.yaml: language must be null or a list of language codes"):
            load_recipe("lic", tmp_path)
    (tmp_path / "lic" / "recipe.yaml").write_text(yaml.safe_dump({**meta, "language": ["en", "zh-Hans"]}))
    assert load_recipe("lic", tmp_path).language == ("en", "zh-Hans")
    record = {"produced": "rbln", "inputs": {"recipe": "lic", "npu": "RBLN-CA25"}}
    card = ModelCard(card_for("lic.atom_max.bnone", record, {"language": ["en", "zh-Hans"]}))
    assert card.data.to_dict()["language"] == ["en", "zh-Hans"]
    assert "language" not in ModelCard(card_for("lic.atom_max.bnone", record, {})).data.to_dict()


def test_recipe_add_takes_the_language_of_a_checkpoints_readme(tmp_path):
    from _checkpoints import make_checkpoint

    from rbln_build.scaffold._recipe import add_recipe

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama", seed=1)
    (ckpt / "README.md").write_text("---\nlanguage:\n- en\n- fr\n- not a code\n---\n# model\n")
    add_recipe("lang", ckpt, tmp_path / "recipes", None, max_seq_len=256)
    assert yaml.safe_load((tmp_path / "recipes" / "lang" / "recipe.yaml").read_text())["language"] == ["en", "fr"]
    assert load_recipe("lang", tmp_path / "recipes").language == ("en", "fr")
