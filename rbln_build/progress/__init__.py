"""What a build shows while it runs, and the summaries after it.

_progress   the events a build reports, their counts and times
_lines      plain lines (CI, logs, pipes)
_live       the live status line on a terminal; make_progress chooses between the two
_summary    under the table: the failed cells by kind and the cells' warnings by message
_eta        the time left: recorded compile durations, this run's, spread over the workers
_reporter   what doit tells the display (which tasks it found up to date)

Imports nothing from the rest of rbln_build: the pipeline feeds it events.
"""

from __future__ import annotations

from ._eta import CompileHistory
from ._lines import LineProgress
from ._live import LiveProgress, make_progress
from ._progress import HISTORY_FILE, Progress, plain
from ._reporter import doit_reporter
from ._summary import failure_summary, warning_summary

__all__ = [
    "HISTORY_FILE",
    "CompileHistory",
    "LineProgress",
    "LiveProgress",
    "Progress",
    "doit_reporter",
    "failure_summary",
    "make_progress",
    "plain",
    "warning_summary",
]
