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
