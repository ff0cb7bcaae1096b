"""Ctrl-C that is never swallowed.

Python turns SIGINT into ``KeyboardInterrupt`` at whatever line the main thread runs. When that line is
in a finalizer (a ``__del__`` or a weakref callback, which the garbage collector runs wherever the code
happens to allocate), Python swallows the exception, prints it as "Exception ignored in ..." with a
traceback, and the program runs on as if no Ctrl-C had come. Seen in CI: a build's worker got the
signal inside the regex module's ``__del__``.

``unwind`` raises ``KeyboardInterrupt`` unless the stack shows a finalizer; then it tries again 50 ms
later (SIGALRM), by when the finalizer has returned. ``catch`` installs that as the SIGINT handler of
the ``rbln-build`` process, and ``sys.unraisablehook`` catches what the stack does not show (a weakref
callback): the swallowed interrupt is retried, and nothing is printed. The build's workers use the
same pieces with their own handler (``execution._workers``).

A process that has imported Ray gets a bound on its exit after Ctrl-C (``bound_exit``): Ray's own
exit hook (``ray.shutdown``) joins Ray's C++ threads, and whatever holds one of them would hold the
process for good. Past ``EXIT_BOUND_S`` the process prints every thread's stack and exits 1.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["unwind", "catch", "retry_swallowed", "bound_exit", "EXIT_BOUND_S"]

RETRY_S = 0.05
EXIT_BOUND_S = 60.0  # from Ctrl-C to the exit of a Ray build at most (``bound_exit``)
_again: Callable[[FrameType | None], None] | None = None  # what a swallowed interrupt retries


def unwind(frame: FrameType | None, again: Callable[[FrameType | None], None]) -> None:
    """Raise ``KeyboardInterrupt`` in ``frame`` (a signal handler's), or, inside a finalizer, call
    ``again(frame)`` from a SIGALRM in ``RETRY_S``."""
    while frame is not None:
        if frame.f_code.co_name == "__del__" or frame.f_code is _swallowed.__code__:
            _later(again)
            return
        frame = frame.f_back
    raise KeyboardInterrupt


def _later(again: Callable[[FrameType | None], None]) -> None:
    signal.signal(signal.SIGALRM, lambda _signum, frame: again(frame))
    signal.setitimer(signal.ITIMER_REAL, RETRY_S)


def _swallowed(unraisable: Any) -> None:
    if _again is not None and isinstance(unraisable.exc_value, KeyboardInterrupt):
        _later(_again)  # swallowed where the stack showed no __del__: once more, quietly
        return
    sys.__unraisablehook__(unraisable)


def retry_swallowed(again: Callable[[FrameType | None], None]) -> None:
    """A ``KeyboardInterrupt`` that Python swallows from now on is retried with ``again``."""
    global _again
    _again = again
    sys.unraisablehook = _swallowed


def _sigint(_signum: int, frame: FrameType | None) -> None:
    if "ray" in sys.modules:
        bound_exit()
    unwind(frame, _sigint_again)


def bound_exit(seconds: float | None = None) -> None:
    """After a Ctrl-C in a process that uses Ray: if it has not exited ``seconds`` later, every
    thread's stack goes to stderr and it exits with status 1 (``faulthandler``: a C thread that needs
    neither the GIL nor the main thread, so it fires even when Ray's shutdown blocks in C++)."""
    import faulthandler

    try:
        faulthandler.dump_traceback_later(EXIT_BOUND_S if seconds is None else seconds, exit=True, file=2)
    except (ValueError, OSError):  # no usable stderr: the exit is unbounded, as before
        pass


def _sigint_again(frame: FrameType | None) -> None:
    unwind(frame, _sigint_again)


def catch() -> None:
    """The ``rbln-build`` process's Ctrl-C: ``KeyboardInterrupt`` as Python's own, never swallowed.
    A SIGINT that was ignored when the process started (a background job of a shell) stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _sigint)
        retry_swallowed(_sigint_again)
