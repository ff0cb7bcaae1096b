"""memory_budget → bytes per device: every accepted form, every rejection, the spec's DRAM errors."""

import math

import pytest

from rbln_build.errors import EstimateError
from rbln_build.estimator._budget import budget_hints, fraction_for_bytes, resolve_budget
from rbln_build.estimator._npu import resolve_npu

CR = resolve_npu("RBLN-CR03")
CA = resolve_npu("RBLN-CA25")
CR_AVAILABLE = 150_323_855_360  # 140 GiB: 4 x (36 GiB - 1 GiB)
CA_AVAILABLE = 16_877_879_296  # 16 GiB - 288 MiB
GiB, MiB = 2**30, 2**20


def test_available_dram_matches_the_specification():
    assert CR.available_bytes == CR_AVAILABLE == 140 * GiB
    assert CA.available_bytes == CA_AVAILABLE == 16 * GiB - 288 * MiB


@pytest.mark.parametrize(
    "npu, budget, expected",
    [
        pytest.param(CR, None, CR_AVAILABLE, id="none-is-all-available-cr"),
        pytest.param(CA, None, CA_AVAILABLE, id="none-is-all-available-ca"),
        # int(150323855360 * 0.3) = int(45097156608.0)
        pytest.param(CR, 0.3, 45_097_156_608, id="fraction-0.3-cr"),
        # int(16877879296 * 0.3) = int(5063363788.8)
        pytest.param(CA, 0.3, 5_063_363_788, id="fraction-0.3-ca-truncates"),
        pytest.param(CR, 0.5, 75_161_927_680, id="fraction-0.5-cr"),
        pytest.param(CR, 1.0, CR_AVAILABLE, id="fraction-1.0-is-100%"),
        pytest.param(CA, "30%", 5_063_363_788, id="percent-equals-fraction"),
        pytest.param(CA, " 30 % ", 5_063_363_788, id="percent-with-whitespace"),
        pytest.param(CA, "100%", CA_AVAILABLE, id="percent-100"),
        pytest.param(CA, "12.5%", 2_109_734_912, id="percent-decimal"),  # 16877879296 / 8
        pytest.param(CR, 1, 1, id="int-1-is-one-byte"),
        pytest.param(CR, 10 * GiB, 10_737_418_240, id="int-bytes"),
        pytest.param(CR, CR_AVAILABLE, CR_AVAILABLE, id="int-exactly-available"),
        pytest.param(CR, "10GB", 10_737_418_240, id="string-gb"),
        pytest.param(CR, "10gb", 10_737_418_240, id="string-lowercase"),
        pytest.param(CR, " 512 MB ", 536_870_912, id="string-whitespace"),
        pytest.param(CR, "1KB", 1024, id="string-kb-binary"),
        pytest.param(CR, "4096", 4096, id="string-bare-digits"),
        pytest.param(CR, "7b", 7, id="string-bytes-unit"),
        pytest.param(CA, "16096MB", 16096 * MiB, id="string-exactly-available-ca"),
    ],
)
def test_accepted_forms(npu, budget, expected):
    assert resolve_budget(budget, npu) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        # 0.12.0: "1e2%".strip() ends with "%" -> float("1e2") / 100 = 1.0 -> int(16877879296 * 1.0)
        pytest.param("1e2%", CA_AVAILABLE, id="exponent"),
        # float("+50") / 100 = 0.5 -> int(16877879296 * 0.5) = 8,438,939,648
        pytest.param("+50%", 8_438_939_648, id="plus-sign"),
        # float("1_0") = 10.0 (an underscore between digits) -> 0.1 -> int(1687787929.6000001) = 1,687,787,929
        pytest.param("1_0%", 1_687_787_929, id="underscore"),
        # " 50 %".strip() = "50 %", minus the "%" = "50 ", float("50 ") = 50.0 -> 0.5 -> 8,438,939,648
        pytest.param(" 50 %", 8_438_939_648, id="space-before-percent"),
        # float() reads any Unicode decimal digits: float("５０") = 50.0 -> 0.5 -> 8,438,939,648
        pytest.param("\uff15\uff10%", 8_438_939_648, id="fullwidth-digits"),
        # float("100.0") / 100 = 1.0: the top of the range is included
        pytest.param("100.0%", CA_AVAILABLE, id="hundred-point-zero"),
    ],
)
def test_percent_text_is_read_by_float_as_in_the_reference(text: str, expected: int) -> None:
    assert resolve_budget(text, CA) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("nan%", id="nan"),  # float("nan") / 100 is nan; 0.0 < nan <= 1.0 is False
        pytest.param("inf%", id="inf"),  # inf / 100 = inf > 1.0
        pytest.param("-inf%", id="minus-inf"),
        pytest.param("Infinity%", id="infinity-spelled-out"),
        pytest.param("1e-400%", id="underflows-to-zero"),  # float("1e-400") = 0.0, not > 0.0
        pytest.param("-50%", id="negative"),
        pytest.param("100.5%", id="above-100"),
    ],
)
def test_percent_out_of_range_gets_the_reference_sentence(text: str) -> None:
    """0.12.0 raises ``memory_budget fraction must be in (0, 1] (or (0%, 100%]), got '<text>'.``"""
    with pytest.raises(EstimateError) as info:
        resolve_budget(text, CA)
    assert info.value.kind == "invalid_budget"
    assert str(info.value).startswith(f"memory_budget fraction must be in (0, 1] (or (0%, 100%]), got {text!r}. ")


def test_fraction_uses_the_reference_float_arithmetic():
    # A fraction resolves as int(available * fraction), not round(); 0.1 * available is not an integer.
    assert resolve_budget(0.1, CR) == int(CR_AVAILABLE * 0.1) == 15_032_385_536
    assert resolve_budget(0.7, CA) == int(CA_AVAILABLE * 0.7) == 11_814_515_507


@pytest.mark.parametrize(
    "npu, budget, message",
    [
        pytest.param(
            CR,
            "1TB",
            "memory_budget (1099511627776 bytes) exceeds the target NPU's available DRAM (150323855360 bytes).",
            id="spec-1TB-on-rebel100",
        ),
        pytest.param(
            CA,
            "100GB",
            "memory_budget (107374182400 bytes) exceeds the target NPU's available DRAM (16877879296 bytes).",
            id="spec-100GB-on-atom-max",
        ),
        pytest.param(
            CR,
            CR_AVAILABLE + 1,
            "memory_budget (150323855361 bytes) exceeds the target NPU's available DRAM (150323855360 bytes).",
            id="one-byte-over-cr",
        ),
        pytest.param(
            CA,
            "16GB",
            "memory_budget (17179869184 bytes) exceeds the target NPU's available DRAM (16877879296 bytes).",
            id="raw-dram-is-not-available-ca",
        ),
    ],
)
def test_over_dram_is_the_specification_error_word_for_word(npu, budget, message):
    with pytest.raises(EstimateError) as info:
        resolve_budget(budget, npu)
    assert str(info.value) == message
    assert info.value.kind == "budget_exceeds_dram"


@pytest.mark.parametrize(
    "budget, fragment",
    [
        pytest.param(True, "must not be a boolean, got True", id="bool-true"),
        pytest.param(False, "must not be a boolean, got False", id="bool-false"),
        pytest.param(float("nan"), "fraction must be in (0, 1] (or (0%, 100%]), got nan.", id="nan"),
        pytest.param(float("inf"), "fraction must be in (0, 1] (or (0%, 100%]), got inf.", id="inf"),
        pytest.param(0.0, "fraction must be in (0, 1] (or (0%, 100%]), got 0.0", id="fraction-zero"),
        pytest.param(-0.5, "got -0.5", id="fraction-negative"),
        pytest.param(1.5, "got 1.5", id="fraction-above-one"),
        pytest.param(10.0, "for a byte count pass an int (10)", id="float-meant-as-bytes"),
        pytest.param("0%", "got '0%'", id="percent-zero"),
        pytest.param("150%", "got '150%'", id="percent-above-100"),
        pytest.param("abc%", "percentage 'abc%' is malformed", id="percent-malformed"),
        pytest.param("nan%", "fraction must be in (0, 1] (or (0%, 100%]), got 'nan%'.", id="percent-nan"),
        pytest.param("%", "percentage '%' is malformed", id="percent-alone"),
        pytest.param("50%%", "percentage '50%%' is malformed", id="percent-twice"),
        pytest.param("0x10%", "percentage '0x10%' is malformed", id="percent-hex"),
        pytest.param("", "'' is not a valid byte size", id="empty-string"),
        pytest.param("1.5GB", "'1.5GB' is not a valid byte size", id="decimal-bytes"),
        pytest.param("10G", "'10G' is not a valid byte size", id="unit-without-b"),
        pytest.param("10 PB", "'10 PB' is not a valid byte size", id="unknown-unit"),
        pytest.param("-5GB", "'-5GB' is not a valid byte size", id="negative-string"),
        pytest.param(0, "byte count must be positive, got 0", id="int-zero"),
        pytest.param(-1, "byte count must be positive, got -1", id="int-negative"),
        pytest.param("0GB", "byte count must be positive, got '0GB'", id="string-zero"),
        pytest.param([1], "unsupported type list", id="list"),
        pytest.param({"bytes": 1}, "unsupported type dict", id="dict"),
    ],
)
def test_rejections_say_what_was_got_and_what_is_accepted(budget, fragment):
    with pytest.raises(EstimateError) as info:
        resolve_budget(budget, CR)
    assert info.value.kind == "invalid_budget"
    assert fragment in str(info.value)
    assert "Accepted forms:" in str(info.value) and '"10GB"' in str(info.value)


def test_tiny_fraction_is_valid_and_resolves_to_zero_bytes_as_in_the_reference():
    assert resolve_budget(1e-12, CA) == 0  # int(16877879296e-12) == 0; estimation then reports no room


@pytest.mark.parametrize(
    "budget, hinted",
    [
        pytest.param(1, True, id="one-byte"),
        pytest.param(MiB - 1, True, id="just-below-1MiB"),
        pytest.param(MiB, False, id="exactly-1MiB"),
        pytest.param(1.0, False, id="float-one"),
        pytest.param("1", False, id="string-one"),
        pytest.param(True, False, id="bool"),
    ],
)
def test_small_int_budget_hint(budget, hinted):
    hints = budget_hints(budget)
    assert bool(hints) is hinted
    if hinted:
        assert "`1` is one byte" in hints[0] and "`1.0` is 100%" in hints[0]


@pytest.mark.parametrize("nbytes", [1, 12_345, 10_796_138_496, CA_AVAILABLE - 1, CA_AVAILABLE])
def test_fraction_for_bytes_is_the_smallest_float_that_resolves_to_at_least_nbytes(nbytes):
    f = fraction_for_bytes(nbytes, CA_AVAILABLE)
    assert f is not None and 0.0 < f <= 1.0
    assert resolve_budget(f, CA) >= nbytes
    below = math.nextafter(f, 0.0)
    assert below == 0.0 or int(CA_AVAILABLE * below) < nbytes


def test_fraction_for_bytes_none_above_available():
    assert fraction_for_bytes(CA_AVAILABLE + 1, CA_AVAILABLE) is None


@pytest.mark.parametrize("value", [None, 0.3, "30%", 1, "10GB", 2**50, "2TB"])
def test_check_budget_accepts_every_form_whatever_the_device(value) -> None:
    from rbln_build.estimator._budget import check_budget

    check_budget(value)  # the form only: "2TB" exceeds every NPU, which is resolve_budget's call


@pytest.mark.parametrize("value", ["abc", True, 1.5, 0, -3, "10 PB", [0.3], float("nan")])
def test_check_budget_rejects_what_resolve_budget_rejects_as_malformed(value) -> None:
    from rbln_build.estimator._budget import check_budget

    with pytest.raises(EstimateError) as checked:
        check_budget(value)
    with pytest.raises(EstimateError) as resolved:
        resolve_budget(value, resolve_npu("RBLN-CR03"))
    assert checked.value.kind == resolved.value.kind == "invalid_budget"
    assert str(checked.value) == str(resolved.value)
