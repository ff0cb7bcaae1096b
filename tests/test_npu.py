"""NPU targets: DRAM left for a budget of 100%, aliases and unknown names."""

import pytest

from rbln_build.errors import EstimateError
from rbln_build.estimator._npu import resolve_npu


@pytest.mark.parametrize(
    "name, family, chiplets, per_chiplet, available",
    [
        pytest.param("RBLN-CR03", "RBLN-CR", 4, 36 * 2**30 - 2**30, 150_323_855_360, id="rebel-140GiB"),
        pytest.param("rebel100", "RBLN-CR", 4, 35 * 2**30, 150_323_855_360, id="rebel-alias"),
        pytest.param("RBLN-CA25", "RBLN-CA", 1, 16 * 2**30 - 288 * 2**20, 16_877_879_296, id="atom-max"),
        pytest.param("rbln-ca12", "RBLN-CA", 1, 16 * 2**30 - 288 * 2**20, 16_877_879_296, id="atom-lowercase"),
        pytest.param("atom_max", "RBLN-CA", 1, 16 * 2**30 - 288 * 2**20, 16_877_879_296, id="atom-alias"),
    ],
)
def test_available_dram(name, family, chiplets, per_chiplet, available):
    npu = resolve_npu(name)
    assert (npu.family, npu.num_chiplets, npu.available_per_chiplet, npu.available_bytes) == (
        family,
        chiplets,
        per_chiplet,
        available,
    )


@pytest.mark.parametrize("name", ["RBLN-XX01", "tpu", "", None, 3])
def test_unknown_npu_names_the_known_ones(name):
    with pytest.raises(EstimateError) as info:
        resolve_npu(name)
    message = str(info.value)
    assert info.value.kind == "unknown_npu"
    assert "RBLN-CA" in message and "RBLN-CR" in message and "rebel100" in message
