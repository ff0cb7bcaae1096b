"""The no-op short cut: a build, ``status`` or ``report`` whose every input and output is as a
no-op left them answers from a stamp without composing, expanding or running doit.

_check    the stamp's key, inputs and outputs; checking them; replaying the answer (imports nothing heavy)
_record   recording a full run's stamp: what it printed, opened and imported
"""

from __future__ import annotations

from ._check import STAMP_DIR, invocation_key, outputs_digest, replay_build, replay_report, status_ids
from ._record import Recorder, Recording, ReportRecorder

__all__ = [
    "STAMP_DIR",
    "Recorder",
    "Recording",
    "ReportRecorder",
    "invocation_key",
    "outputs_digest",
    "replay_build",
    "replay_report",
    "status_ids",
]
