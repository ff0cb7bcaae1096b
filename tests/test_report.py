"""The AllocationReport contract: JSON round trip, DramTensor excluded, malformed input named."""

import json

import pytest

from rbln_build.estimator._report import AllocationReport


def _report_json():
    return {
        "alloc": {
            "prefill": {"weights": [[100, 200]], "DramTensor": [[999, 999]]},
            "decode": {"workspace": [[1, 2]]},
        },
        "kv_tensors": {"k0": {"can_resize": True, "sizes": [[10, 0]]}, "w0": {"can_resize": False, "sizes": [[5, 5]]}},
        "current_blocks": 3,
    }


def test_non_kv_bytes_sum_every_graph_and_key_except_dram_tensor():
    report = AllocationReport.from_json(_report_json())
    assert report.non_kv_per_chiplet() == {(0, 0): 101, (0, 1): 202}
    assert report.chiplets() == {(0, 0), (0, 1)}
    assert report.current_blocks == 3


def test_round_trip_is_canonical():
    report = AllocationReport.from_json(_report_json())
    text = json.dumps(report.to_json(), sort_keys=True)
    again = AllocationReport.from_json(json.loads(text))
    assert again == report
    assert json.dumps(again.to_json(), sort_keys=True) == text


@pytest.mark.parametrize(
    "patch, where",
    [
        pytest.param({"alloc": {"prefill": {"weights": [[1, -2]]}}}, "alloc.prefill.weights[0][1]", id="negative"),
        pytest.param({"alloc": {"prefill": {"weights": [1]}}}, "alloc.prefill.weights[0]", id="not-a-grid"),
        pytest.param(
            {"kv_tensors": {"k": {"can_resize": "yes", "sizes": [[1]]}}}, "kv_tensors.k.can_resize", id="bool"
        ),
        pytest.param({"kv_tensors": {"k": {"sizes": [[1]]}}}, "kv_tensors.k", id="missing-field"),
        pytest.param({"current_blocks": 0}, "current_blocks", id="zero-blocks"),
    ],
)
def test_malformed_reports_name_the_field(patch, where):
    value = _report_json()
    value.update(patch)
    with pytest.raises(ValueError) as info:
        AllocationReport.from_json(value)
    assert str(info.value).startswith(where)
