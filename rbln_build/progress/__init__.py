"""What a build shows while it runs, and the summaries after it.

_progress   the live line (a terminal) or plain lines (a log), one line per finished cell, and
            the failure and warning summaries under the table
_eta        the time left: recorded compile durations, this run's, spread over the workers
_reporter   what doit tells the display (which tasks it found up to date)

Imports nothing from the rest of rbln_build: the pipeline feeds it events.
"""

from __future__ import annotations

from ._progress import HISTORY_FILE, failure_summary, make_progress, warning_summary
from ._reporter import doit_reporter

__all__ = ["HISTORY_FILE", "doit_reporter", "failure_summary", "make_progress", "warning_summary"]
