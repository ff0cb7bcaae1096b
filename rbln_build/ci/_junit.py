"""JUnit XML of a build: one ``testcase`` per cell (``classname`` the model, ``name`` the cell id,
``time`` its cost this run from summary.json, 0 for a cell reused unchanged).

How each status reads, as JUnit consumers (Jenkins, GitLab, GitHub test reporters) understand it:

* ``ok``: a passed test case;
* ``failed``: a ``<failure>`` whose ``type`` is the error kind and whose ``message`` the error;
* ``expected_failure`` (declared in ``matrix.expect_failure`` and failing as declared): a
  ``<skipped type="expected_failure">``, as pytest writes an xfail;
* ``unexpected_success`` (declared to fail, but built): a ``<failure type="unexpected_success">``,
  as pytest writes a strict xpass (it fails the run here too).

The file is written atomically (temp file in the same folder, then rename).
"""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["junit_xml", "write_junit"]

SUITE = "rbln-build"


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def junit_xml(entries: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> bytes:
    """The JUnit XML document of ``entries`` (manifest entries) with ``summary``'s cell costs."""
    cost: Mapping[str, float] = summary.get("cell_cost_s") or {}
    failures = skipped = 0
    total = 0.0
    suite = ET.Element("testsuite", name=SUITE)
    for e in entries:
        cid = str(e["cell"])
        took = float(cost.get(cid, 0.0))
        total += took
        inputs = e.get("inputs") or {}
        case = ET.SubElement(
            suite, "testcase", classname=f"{SUITE}.{inputs.get('model') or cid.split('.', 1)[0]}", name=cid
        )
        case.set("time", _seconds(took))
        status, error = e.get("status"), str(e.get("error") or "")
        if status == "failed":
            failures += 1
            node = ET.SubElement(case, "failure", type=str(e.get("error_kind") or "build_failed"), message=error)
            node.text = error
        elif status == "unexpected_success":
            failures += 1
            message = error or "declared in matrix.expect_failure, but it built"
            node = ET.SubElement(case, "failure", type="unexpected_success", message=message)
            node.text = message
        elif status == "expected_failure":
            skipped += 1
            ET.SubElement(case, "skipped", type="expected_failure", message=f"{e.get('error_kind')}: {error}")
    counts = {"tests": str(len(entries)), "failures": str(failures), "errors": "0", "skipped": str(skipped)}
    for key, value in counts.items():
        suite.set(key, value)
    suite.set("time", _seconds(total))
    root = ET.Element("testsuites", name=SUITE, tests=counts["tests"], failures=counts["failures"], errors="0")
    root.set("time", _seconds(total))
    root.append(suite)
    ET.indent(root)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True)) + b"\n"


def write_junit(path: Path, entries: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> None:
    """Write ``junit_xml`` to ``path`` atomically. Raises OSError."""
    data = junit_xml(entries, summary)
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
