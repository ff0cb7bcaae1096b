"""A release engineer's wrong inputs to the newest commands (plan --cards, reproduce, release, diff,
the build's own options): each is one line on stderr, exit 2, naming what was refused, what it got
and what to do. Found by a new-user probe; each case says what it was before."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_input_boundary import one_line_error, run_cli

from rbln_build.inspection._server import parse_server_args


@pytest.mark.parametrize(
    ("argv", "prog", "says"),
    [
        # before: "required: NAME, cache.KEY=VALUE" (argparse's 3.11 message counts an optional list)
        pytest.param(["release"], "rbln-build release: ", "the following arguments are required: NAME;", id="release"),
        pytest.param(
            ["reproduce"], "rbln-build reproduce: ", "the following arguments are required: RELEASE;", id="reproduce"
        ),
        # before: "release name 'build_dir=b' is not a safe folder name"
        pytest.param(
            ["release", "build_dir=b"],
            "rbln-build release: ",
            "'build_dir=b' stands where the release's name belongs; give the name first",
            id="release-override-as-name",
        ),
        # before: two lines (the message, then the usage)
        pytest.param(
            ["diff", "--format=markdwn", "a", "b"],
            "rbln-build diff: ",
            "--format 'markdwn': use text, markdown or json",
            id="diff-format",
        ),
        # before: only the usage line, not saying what was wrong
        pytest.param(
            ["diff", "a"],
            "rbln-build diff: ",
            "expected two manifests or releases (OLD NEW), got 1: 'a'",
            id="diff-one",
        ),
        pytest.param(["diff", "--bogus", "a", "b"], "rbln-build diff: ", "unknown option '--bogus'", id="diff-option"),
        # before: Hydra's "LexerNoViableAltException: --cards=0 ^ See https://hydra.cc/..."
        pytest.param(
            ["plan", "--cards=0"], "rbln-build plan: ", "expected a whole number of cards >= 1, got '0'", id="cards="
        ),
        pytest.param(
            ["plan", "--card=2"],
            "rbln-build plan: ",
            "'--card=2': not an option of this command, and overrides are KEY=VALUE",
            id="plan-typo",
        ),
        # before: Hydra's whole argparse usage (every Hydra flag) on the one line
        pytest.param(
            ["--bogus"], "rbln-build: ", "unrecognized arguments: --bogus; overrides are KEY=VALUE", id="build-option"
        ),
        pytest.param(
            ["status", "--bogus"],
            "rbln-build: ",
            "unrecognized arguments: --bogus; overrides are KEY=VALUE",
            id="status",
        ),
    ],
)
def test_a_wrong_argument_is_one_line_saying_what_to_do(tmp_path: Path, argv: list[str], prog: str, says: str) -> None:
    code, _, err = run_cli(argv, tmp_path)
    line = one_line_error(code, err, prog)
    assert says in line
    assert "usage:" not in line and "hydra.cc" not in line


def test_plan_takes_cards_and_pin_with_an_equals_sign_too() -> None:
    assert parse_server_args(["--cards=3", "--pin=m=1", "x=y"]) == (3, {"m": 1}, ["x=y"])
    assert parse_server_args(["--cards", "3", "--pin", "m=1", "x=y"]) == (3, {"m": 1}, ["x=y"])


def test_plan_cards_is_bounded_before_the_planner_sizes_anything() -> None:
    """Before: ``plan --cards 99999999999`` was an internal error (MemoryError, exit 3)."""
    from rbln_build.errors import ConfigError

    with pytest.raises(ConfigError, match=r"plan --cards: 99999999999 is over the limit of 64"):
        parse_server_args(["--cards", "99999999999"])
    assert parse_server_args(["--cards", "64"])[0] == 64


def test_junit_says_which_of_its_two_problems_it_is(tmp_path: Path) -> None:
    """Before: one message for both, "its folder does not exist or it is a folder"."""
    code, _, err = run_cli(["--junit", str(tmp_path)], tmp_path)
    assert f"a folder; give a file path in it, e.g. --junit {tmp_path / 'build-junit.xml'}" in one_line_error(
        code, err, "rbln-build: "
    )
    code, _, err = run_cli(["--junit", str(tmp_path / "no" / "x.xml")], tmp_path)
    assert f"its folder does not exist ({tmp_path / 'no'}); create it first" in one_line_error(
        code, err, "rbln-build: "
    )


@pytest.mark.parametrize("command", ["verify", "reproduce"])
@pytest.mark.parametrize("location", ["", " ", "file://"])
def test_an_empty_release_location_is_not_the_current_folder(tmp_path: Path, command: str, location: str) -> None:
    """Before: ``verify ""`` (a variable unset) and ``verify file://`` verified the current folder."""
    code, _, err = run_cli([command, location], tmp_path)
    assert f"{location!r}: empty; give the release folder" in one_line_error(code, err, f"rbln-build {command}: ")


@pytest.mark.parametrize("argv", [["plan", "deployment="], ["deployment="]])
def test_an_empty_group_choice_lists_the_options_without_hydras_search_path(tmp_path: Path, argv: list[str]) -> None:
    """Before: Hydra's "Could not find 'deployment/' ... Config search path: provider=hydra, ..."."""
    code, _, err = run_cli(argv, tmp_path)
    line = one_line_error(code, err, "rbln-build")
    assert "deployment=: empty; choose one of its options (" in line and "tiny_pair" in line
    assert "search path" not in line


def test_a_missing_key_above_the_last_part_is_named_with_the_deployments_keys() -> None:
    """Before: ``deployment.modle.port=2`` said "deployment.modle.port: no such key; the keys there: ."
    (the deployment's schema was not looked up, and the wrong part was named)."""
    from rbln_build.config import closest_names

    hydra_says = (
        "Could not override 'deployment.modle.port'. To append to your config use +deployment.modle.port=2 "
        "Key 'modle' not in 'DeploymentConf' full_key: deployment.modle object_type=DeploymentConf"
    )
    said = closest_names(hydra_says)
    assert said == "deployment.modle: no such key; did you mean deployment.mode or deployment.models?"
