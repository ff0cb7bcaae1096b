"""Reports people would rather look at: ``rbln-build report`` and ``explain --plot``.

    _data      read a build directory: manifest.json and each compile entry's AllocationReport
    _compose   the figures of one compile (the report's pair, explain's picture)
    _grid      the matrix grid section;  _compare: report --compare;  _changes: manifest changes
    _rows      one row per changed cell with its deltas (diff's text and Markdown, report --compare)
    _page      the self-contained index.html;  _html: the small HTML pieces its sections share
    _plot      ``explain --plot FILE``
    _cli       ``rbln-build report [build_dir=PATH] [--open]``

The figures themselves are ``rbln_build.figures``. Imports only ``rbln_build.figures``,
``rbln_build.estimator`` and ``rbln_build.errors`` (a test checks it): never torch,
transformers, Hydra or the build machinery, so a report of any build is cheap. matplotlib is an
optional extra (``pip install 'rbln-build[report]'``); it is imported only when a figure is drawn.
"""

from __future__ import annotations

from ..figures import BlocksCurve, ChipletStack, blocks_curve, dram_stacks
from ._changes import FIELDS, cells_of, diff_manifests, document_path
from ._cli import main, write_report
from ._data import BuildView, Group, load_build
from ._plot import plot_deployment, plot_explanation, plot_format
from ._rows import cell_rows, markdown_rows, quality_columns, text_rows

__all__ = [
    "quality_columns",
    "BlocksCurve",
    "BuildView",
    "ChipletStack",
    "FIELDS",
    "Group",
    "blocks_curve",
    "cell_rows",
    "cells_of",
    "diff_manifests",
    "document_path",
    "dram_stacks",
    "load_build",
    "main",
    "markdown_rows",
    "plot_deployment",
    "plot_explanation",
    "plot_format",
    "text_rows",
    "write_report",
]
