"""Every suggestion `rbln-build plan` prints for an infeasible deployment, applied exactly as printed
(the override line under it, appended to the same command), plans as feasible with the printed counts.

Deployments are generated as overrides of the shipped tiny_pair config (models, geometry, minimums,
a fixed budget, a reservation, device and mode), and planned through the real command in process
(the models' reports from the memory model, inventories shared by the test process).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from memory_helpers import _CACHE, inventory

from rbln_build.inspection._deploy import main

FLOORS = {"tiny_llama": (5, 8), "tiny_qwen3": (9, 16)}  # floor and full pool at the recipe's batch 2


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for name in FLOORS:
        inventory(name)
    root = tmp_path_factory.mktemp("inv")
    shutil.copytree(_CACHE, root / "inventory")
    return root


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["plan", *args])
    return code, capsys.readouterr().out


@st.composite
def deployments(draw: Any) -> list[str]:
    device = draw(st.sampled_from(["atom_max", "rebel100"]))
    models = []
    for i in range(draw(st.integers(2, 3))):
        recipe = draw(st.sampled_from(sorted(FLOORS)))
        entry = f"model:{recipe},name:m{i}"
        choice = draw(st.sampled_from(["none", "batch", "min_blocks", "length"]))
        if choice == "batch":
            entry += f",batch_size:{draw(st.integers(1, 3))}"
        elif choice == "min_blocks":
            floor, full = FLOORS[recipe]
            entry += f",min_blocks:{draw(st.integers(floor + 1, full))}"
        elif choice == "length":
            entry += f",max_seq_len:{draw(st.sampled_from([2048, 3072, 4096]))}"
        if draw(st.integers(0, 4)) == 0:
            entry += ",weight:2"
        models.append("{" + entry + "}")
    if draw(st.integers(0, 4)) == 0:
        models[-1] = (
            re.sub(r",min_blocks:\d+", "", models[-1])[:-1] + f",memory_budget:{draw(st.integers(60, 500))}MB}}"
        )
    available = {"atom_max": 16_877_879_296, "rebel100": 37_580_963_840}[device]
    chiplets = {"atom_max": 1, "rebel100": 4}[device]
    cap = draw(st.integers(40, 320)) * 2**20
    chiplet = draw(st.sampled_from([None, *range(chiplets)]))
    nbytes = (available - cap) if chiplet is not None else (available - cap) * chiplets
    where = "null" if chiplet is None else str(chiplet)
    return [
        "deployment=tiny_pair",
        f"deployment.device={device}",
        f"deployment.mode={draw(st.sampled_from(['budget', 'blocks']))}",
        "deployment.models=[" + ",".join(models) + "]",
        f"deployment.reservations=[{{name:other,bytes:{nbytes},chiplet:{where}}}]",
    ]


SUGGESTION = re.compile(r"^  (?P<what>.+): gives up (?P<given>[0-9.]+); plan: (?P<plan>.*)$")


def printed_suggestions(out: str) -> list[tuple[str, dict[str, int], list[str]]]:
    """(description, counts, overrides) for every suggestion printed."""
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("changes that fit")), len(lines))
    found = []
    for i in range(start + 1, len(lines)):
        m = SUGGESTION.match(lines[i])
        if m is None:
            continue
        counts = {k: int(v) for k, v in (p.rsplit(" ", 1) for p in m.group("plan").split(", "))}
        found.append((m.group("what"), counts, shlex.split(lines[i + 1].strip())))
    return found


@pytest.mark.slow  # ~1 min on 2 busy cores: every suggestion re-plans through the real command
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(args=deployments())
def test_every_printed_suggestion_applied_as_printed_plans_feasible(
    args: list[str],
    cache_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(cache_dir))
    base = [*args, f"build_dir={tmp_path / 'build'}"]
    code, out = run(base, capsys)
    assume(code == 1)  # an infeasible deployment (a config error would exit 2, and fail below)
    suggestions = printed_suggestions(out)
    event(f"{len(suggestions)} suggestion(s)")
    for what, counts, overrides in suggestions:
        assert overrides, what
        code, again = run([*base, *overrides, "--json"], capsys)
        assert code == 0, (what, overrides, again[-2000:])
        data = json.loads(again)
        planned = data["plans"][data["mode"]]["models"]
        assert {n: m["kvcache_num_blocks"] for n, m in planned.items()} == counts, what
    assert not (tmp_path / "build").exists()  # planning writes nothing


def test_the_docs_infeasible_example_prints_the_largest_reservation(
    cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/colocation.md section 3: 110 GB spread over the Rebel100; 108,072 MiB (105.5 GiB) fits
    for name in ("qwen3_8b", "llama3_2_1b"):
        inventory(name)
    shutil.copytree(_CACHE, cache_dir / "inventory", dirs_exist_ok=True)
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(cache_dir))
    base = [
        "deployment=qwen3_8b_llama3_2_1b",
        "deployment.reservations.0.bytes=110GB",
        "deployment.reservations.0.chiplet=null",
        f"build_dir={tmp_path / 'build'}",
    ]
    code, out = run(base, capsys)
    assert code == 1
    found = printed_suggestions(out)
    assert found[0][0].startswith("reservation vision_encoder: bytes 118,111,600,640 -> 113,321,705,472")
    assert found[0][2] == ["deployment.reservations.0.bytes=108072MB"]
    code, _ = run([*base[:-1], "deployment.reservations.0.bytes=108073MB", base[-1]], capsys)
    assert code == 1  # one MiB more does not fit
    for what, counts, overrides in found:
        code, again = run([*base, *overrides, "--json"], capsys)
        data = json.loads(again)
        assert code == 0 and counts == {
            n: m["kvcache_num_blocks"] for n, m in data["plans"][data["mode"]]["models"].items()
        }, what


def test_a_model_that_cannot_fit_even_alone_gets_the_devices_where_it_fits(
    cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/colocation.md section 3: Qwen3-8B on one ATOM-Max; the serve devices pinned to [3], so a
    # device of another count unpins them in its overrides (and the change applies as printed)
    for name in ("qwen3_8b", "llama3_2_1b"):
        inventory(name)
    shutil.copytree(_CACHE, cache_dir / "inventory", dirs_exist_ok=True)
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(cache_dir))
    base = [
        "deployment=qwen3_8b_llama3_2_1b",
        "deployment.device=atom_max",
        "deployment.reservations=[{name:vision_encoder,bytes:4GB}]",
        "deployment.serve.device_ids=[3]",
        f"build_dir={tmp_path / 'build'}",
    ]
    code, out = run(base, capsys)
    assert code == 1
    assert "qwen3_8b cannot fit even alone on atom_max; alone it fits on: atom_max_x4, rebel100." in out
    found = {what.split(" (")[0]: overrides for what, _, overrides in printed_suggestions(out)}
    assert found["device atom_max -> atom_max_x4"] == [
        "deployment.device=atom_max_x4",
        "deployment.serve.device_ids=null",
    ]
    assert found["device atom_max -> rebel100"] == ["deployment.device=rebel100"]
    for overrides in found.values():
        code, _ = run([*base, *overrides], capsys)
        assert code == 0, overrides


def test_pairs_of_changes_are_printed_and_apply_as_printed(
    cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # three tiny models on a Rebel100 whose own margin (device_margins) leaves 0.28 % of each chiplet:
    # no single change fits (the deployment's margin, 0.999, holds only on other devices of another
    # count), pairs do; each printed pair, applied as printed, plans with its printed counts
    monkeypatch.setenv("RBLN_BUILD_CACHE", str(cache_dir))
    base = [
        "deployment=tiny_pair",
        "deployment.device=rebel100",
        "deployment.models=[{model:tiny_qwen3,name:q1},{model:tiny_qwen3,name:q2},{model:tiny_llama,name:l1}]",
        "deployment.reservations=[]",
        "deployment.margin=0.999",
        "deployment.device_margins=[0.9972]",
        f"build_dir={tmp_path / 'build'}",
    ]
    code, out = run(base, capsys)
    assert code == 1
    assert "no single change fits; pairs of changes searched with " in out
    found = printed_suggestions(out)
    printed = {what: overrides for what, _, overrides in found}
    assert all(" AND " in what for what in printed)
    assert {"drop model q2 AND drop model q1", "drop model l1 AND drop model q1"} <= set(printed)
    # a dropped model and a change to another: one list of the models that stay, the change folded in
    assert printed["q2: max_seq_len 8192 -> 7168 AND drop model q1"] == [
        "deployment.models=[{model:tiny_qwen3,name:q2,max_seq_len:7168,port:8101},{model:tiny_llama,name:l1,port:8102}]"
    ]
    for what, counts, overrides in found:
        code, again = run([*base, *overrides, "--json"], capsys)
        assert code == 0, (what, overrides, again[-2000:])
        data = json.loads(again)
        assert {n: m["kvcache_num_blocks"] for n, m in data["plans"][data["mode"]]["models"].items()} == counts, what
    code, raw = run([*base, "--json"], capsys)
    data = json.loads(raw)
    assert data["combination_search"]["complete"] and data["combination_search"]["limit"] == 400
    assert all(len(s["parts"]) == 2 and s["kind"] == "combination" for s in data["suggestions"])
    assert [s["overrides"] for s in data["suggestions"]] == [o for _, _, o in found]
