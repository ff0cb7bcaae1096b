"""The deployment's ``server`` key: composed from a file or the command line, checked with one-line
errors that name the key, what it got and what to do (a misspelt key or model gets the closest
name); and ``plan --cards/--pin`` over it (the flags replace its cards and add or move pins)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rbln_build.config._config import compose_settings
from rbln_build.config._deployment import deployment_from_config
from rbln_build.deploy.server import ServerSpec
from rbln_build.errors import ConfigError
from rbln_build.inspection._server import parse_server_args, with_server


def node(server: object, **changes: object) -> object:
    base = {"device": "atom_max", "models": [{"model": "tiny_llama"}, {"model": "tiny_qwen3"}], "server": server}
    return OmegaConf.create({**base, **changes})


def test_a_server_composes_from_the_command_line() -> None:
    d = compose_settings(["deployment=tiny_pair", "deployment.server={cards:3,pins:{tiny_qwen3:2}}"]).deployment
    assert d.server == ServerSpec(3, (("tiny_qwen3", 2),))
    assert d.device_ids == (0, 1, 2)  # every card's devices, in card order
    assert compose_settings(["deployment=tiny_pair"]).deployment.server is None  # the default: one card


def test_serve_device_ids_list_every_card_of_the_server() -> None:
    d = deployment_from_config("x", node({"cards": 2}, serve={"device_ids": [4, 6]}))
    assert d.server == ServerSpec(2) and d.device_ids == (4, 6)
    with pytest.raises(ConfigError) as err:
        deployment_from_config("x", node({"cards": 2}, serve={"device_ids": [4]}))
    assert str(err.value) == (
        "deployment.serve.device_ids (x): expected 2 distinct device number(s) for atom_max (num_devices 1, x 2 "
        "cards of the server), got [4]."
    )


@pytest.mark.parametrize(
    ("server", "message"),
    [
        (
            {"cards": 0},
            "deployment.server.cards: expected a whole number of cards from 1 to 64, got 0; set it to the cards of "
            "the server the models are placed on.",
        ),
        ({"cards": "two"}, "deployment.server.cards: expected a whole number of cards from 1 to 64, got 'two'"),
        ({"pins": {"tiny_llama": 0}}, "deployment.server.cards: missing; give the server's number of cards"),
        (
            {"card": 2},
            "deployment.server.card: not a server key; did you mean deployment.server.cards? a server is "
            "{cards: N, pins: {MODEL: CARD}}.",
        ),
        (
            {"cards": 2, "pins": {"tiny_lama": 1}},
            "deployment.server.pins.tiny_lama: not a model of the deployment; did you mean tiny_llama? its models: "
            "tiny_llama, tiny_qwen3.",
        ),
        (
            {"cards": 2, "pins": {"tiny_llama": 2}},
            "deployment.server.pins.tiny_llama: card 2 does not exist (the server has 2 card(s): 0..1); pin it to "
            "one of them or raise cards.",
        ),
        ({"cards": 2, "pins": [0, 1]}, "deployment.server.pins: expected a mapping of a model's name to its card"),
        (3, "deployment.server: expected a mapping {cards: N, pins: {MODEL: CARD}}, got 3."),
    ],
)
def test_server_mistakes_name_their_key(server: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        deployment_from_config("x", node(server))
    assert message in str(err.value)


def test_the_flags_override_the_configured_server() -> None:
    settings = compose_settings(["deployment=tiny_pair", "deployment.server={cards:2,pins:{tiny_llama:1}}"])
    cards, pins, rest = parse_server_args(["--cards", "3", "--pin", "tiny_qwen3=2", "build_dir=x"])
    assert rest == ["build_dir=x"]
    d = with_server(settings, cards, pins).deployment
    assert d.server == ServerSpec(3, (("tiny_llama", 1), ("tiny_qwen3", 2))) and d.device_ids == (0, 1, 2)
    # a pin alone moves one model on the configured server; its cards stay
    d = with_server(settings, None, {"tiny_llama": 0}).deployment
    assert d.server == ServerSpec(2, (("tiny_llama", 0),)) and d.device_ids == (0, 1)
    with pytest.raises(ConfigError, match=r"deployment.server.pins.tiny_llama: card 1 does not exist"):
        with_server(settings, 1, {})  # the config's pin to card 1 on a server of one card
    with pytest.raises(ConfigError, match=r"plan --pin: pins a model to a card of a server; give the server's --cards"):
        with_server(compose_settings(["deployment=tiny_pair"]), None, {"tiny_llama": 0})
