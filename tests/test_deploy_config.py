"""The ``deployment`` config group: every option composes against its schema; mistakes are
ConfigErrors that name the key (and the index inside a list)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from omegaconf import OmegaConf

from rbln_build.config._config import CONF_DIR, compose_settings, list_group_options
from rbln_build.config._deployment import deployment_from_config
from rbln_build.deploy import Reservation
from rbln_build.errors import ConfigError


@pytest.mark.parametrize("name", list_group_options("deployment"))
def test_every_deployment_composes(name: str) -> None:
    settings = compose_settings([f"deployment={name}"])
    d = settings.deployment
    assert d is not None and d.name == name and d.models and d.mode in ("budget", "blocks")
    assert (CONF_DIR / "deployment" / f"{name}.yaml").read_text().count("/deployment_schema@_here_") == 1


def test_the_tiny_pair_as_configured() -> None:
    d = compose_settings(["deployment=tiny_pair"]).deployment
    assert d.device.name == "atom_max" and d.device.npu == "RBLN-CA25" and d.device_ids == (0,)
    assert [(m.name, m.model.recipe, m.port, m.weight) for m in d.models] == [
        ("tiny_llama", "tiny_llama", 8100, Fraction(1)),
        ("tiny_qwen3", "tiny_qwen3", 8101, Fraction(1)),
    ]
    assert d.reservations == (Reservation("other_tenant", 16_640_901_120, None),)


def test_the_shipped_rebel100_deployment() -> None:
    d = compose_settings(["deployment=qwen3_8b_llama3_2_1b"]).deployment
    assert d.device.name == "rebel100"
    assert [(m.name, m.batch_size, m.max_seq_len) for m in d.models] == [
        ("qwen3_8b", 8, 40960),
        ("llama3_2_1b", None, None),
    ]
    assert d.reservations == (Reservation("vision_encoder", 20 * 2**30, 0),)


def test_overrides_reach_the_deployment() -> None:
    d = compose_settings(
        [
            "deployment=tiny_pair",
            "deployment.mode=blocks",
            "deployment.models.0.batch_size=1",
            "deployment.models.1.weight=2.5",
            "deployment.serve.port=9000",
        ]
    ).deployment
    assert d.mode == "blocks" and d.models[0].batch_size == 1 and d.models[1].weight == Fraction(5, 2)
    assert [m.port for m in d.models] == [9000, 9001]


def base(**changes: object) -> dict:
    node = {"device": "atom_max", "models": [{"model": "tiny_llama"}, {"model": "tiny_qwen3"}]}
    node.update(changes)
    return node


@pytest.mark.parametrize(
    ("node", "message"),
    [
        pytest.param(
            base(models=[{"model": "tiny_llama", "batchsize": 3}]),
            "deployment.models[0].batchsize: Key 'batchsize' not in 'DeploymentModelConf'",
            id="misspelt-model-key",
        ),
        pytest.param(
            base(models=[{"model": "tiny_llama"}, {"model": "tiny_qwen3", "batch_size": "x"}]),
            "deployment.models[1].batch_size: Value 'x'",
            id="wrong-type",
        ),
        pytest.param(base(modles=[]), "deployment.modles: Key 'modles' not in 'DeploymentConf'", id="misspelt-key"),
        pytest.param(base(mode="fast"), "deployment.mode: Invalid value 'fast'", id="mode"),
        pytest.param(base(models=[]), "deployment.models (x): an empty list deploys nothing", id="no-models"),
        pytest.param(
            base(models=[{"model": "nope"}]), "deployment.models[0].model: unknown model 'nope'", id="unknown-model"
        ),
        pytest.param(base(device="nope"), "deployment.device: unknown device 'nope'", id="unknown-device"),
        pytest.param(
            base(models=[{"model": "tiny_llama"}, {"model": "tiny_llama"}]),
            "deployment.models[1]: the name 'tiny_llama' is used twice",
            id="same-name",
        ),
        pytest.param(
            base(models=[{"model": "tiny_llama", "port": 8001}, {"model": "tiny_qwen3"}]),
            "two models share a port ([8001, 8001])",
            id="same-port",
        ),
        pytest.param(
            base(models=[{"model": "tiny_llama", "weight": 0}]),
            "deployment.models[0].weight: expected a positive",
            id="weight",
        ),
        pytest.param(
            base(models=[{"model": "tiny_llama", "min_blocks": 0}]),
            "deployment.models[0].min_blocks: expected",
            id="min-blocks",
        ),
        pytest.param(
            base(models=[{"model": "tiny_llama", "memory_budget": "50pct"}]),
            "deployment.models[0].memory_budget: memory_budget '50pct' is not a valid byte size",
            id="budget",
        ),
        pytest.param(
            base(models=[{"model": "tiny_llama", "memory_budget": 0.3, "min_blocks": 6}]),
            "memory_budget fixes this model's count, so min_blocks does not apply",
            id="budget-and-min",
        ),
        pytest.param(
            base(reservations=[{"name": "a", "bytes": "4 GiB"}]),
            "deployment.reservations[0].bytes: expected bytes per device",
            id="reservation-bytes",
        ),
        pytest.param(
            base(reservations=[{"name": "a", "bytes": 0.5}]),
            "deployment.reservations[0].bytes: expected bytes per device",
            id="reservation-fraction",
        ),
        pytest.param(
            base(reservations=[{"name": "a", "bytes": 1, "chiplet": -1}]),
            "deployment.reservations[0].chiplet: expected an integer >= 0",
            id="reservation-chiplet",
        ),
        pytest.param(
            base(reservations=[{"nme": "a", "bytes": 1}]),
            "deployment.reservations[0].nme: Key 'nme' not in 'ReservationConf'",
            id="reservation-key",
        ),
        pytest.param(
            base(serve={"device_ids": [0, 1]}), "deployment.serve.device_ids (x): expected 1 distinct", id="ids"
        ),
    ],
)
def test_mistakes_name_their_key(node: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        deployment_from_config("x", OmegaConf.create(node))
    assert message in str(info.value)


def test_reservation_bytes_take_binary_units() -> None:
    d = deployment_from_config(
        "x",
        OmegaConf.create(base(reservations=[{"name": "a", "bytes": "4GB", "chiplet": 0}, {"name": "b", "bytes": 123}])),
    )
    assert d.reservations == (Reservation("a", 4 * 2**30, 0), Reservation("b", 123, None))


def test_a_deployment_does_not_take_the_matrix_narrowing_overrides() -> None:
    with pytest.raises(ConfigError, match="model=, device= and budget= do not apply"):
        compose_settings(["deployment=tiny_pair", "budget=0.3"])
