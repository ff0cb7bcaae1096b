"""What only a host with the real Rebellions compiler and an NPU can check (docs/backends.md).

Run there with the SDK installed (rebel-compiler and optimum-rbln 0.12.0, no tests/fakes on the path):

    RBLN_BUILD_NPU_TESTS=1 python -m pytest -m npu tests/test_rbln_npu.py

Skipped everywhere else: without the variable, when ``rebel`` is the test stand-in, or without an NPU.
"""

from __future__ import annotations

import json
import os

import pytest
from _torch_cells import spec_for

from rbln_build.backends import get_backend
from rbln_build.memory._recipes import load_recipe

pytestmark = pytest.mark.npu


@pytest.fixture(scope="module")
def real_sdk():
    if os.environ.get("RBLN_BUILD_NPU_TESTS") != "1":
        pytest.skip("set RBLN_BUILD_NPU_TESTS=1 on a host with rebel-compiler, optimum-rbln 0.12.0 and an NPU")
    rebel = pytest.importorskip("rebel")
    if str(getattr(rebel, "__version__", "")).endswith("+standin"):
        pytest.skip("rebel is the test stand-in (tests/fakes); this needs the real compiler")
    if not rebel.npu_is_available(0):
        pytest.skip("no NPU on this host")
    pytest.importorskip("optimum.rbln")
    return rebel, rebel.get_npu_name(0)


def test_a_finalized_cell_runs_on_the_npu_with_its_resized_pool(real_sdk, tmp_path) -> None:
    from optimum.rbln import RBLNAutoModelForCausalLM

    _, npu = real_sdk
    spec = spec_for(load_recipe("tiny_llama"), npu=npu)  # the attached NPU's name, e.g. RBLN-CA25
    base, cell = tmp_path / "base", tmp_path / "cell"
    base.mkdir()
    cell.mkdir()
    backend = get_backend("rbln")
    report = backend.compile(spec, base).report
    assert report.kv_tensors and report.current_blocks >= spec.attention.num_min_blocks
    n = spec.attention.num_min_blocks
    backend.finalize(spec, base, n, cell)
    assert json.loads((cell / "rbln_config.json").read_text())["kvcache_num_blocks"] == n
    model = RBLNAutoModelForCausalLM.from_pretrained(str(cell), export=False)  # runtimes on the NPU
    assert model.rbln_config.kvcache_num_blocks == n
    import torch

    out = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 7)
