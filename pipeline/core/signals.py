"""SIGTERM as the command line handles it (:mod:`pipeline.entry`): recorded, then raised
in the main thread as :class:`Terminated`, which unwinds the command like Ctrl-C.

The exception is not always seen: Python ignores an exception raised where nothing can
take it (a weakref callback, which a signal arriving during an import lands in, prints
"Exception ignored in ..." and goes on), and a library may turn it into its own. A
command whose SIGTERM was lost so ran to its end and published OUT with exit 0, and
ignored every later SIGTERM (the handler had set it to be ignored, so that a second one
would not interrupt the first one's clean-up). So the signal is also recorded, and
every step that would start writing or publish an output :func:`checks <check>` it:
once SIGTERM has arrived, nothing is published.

Imports nothing beyond the standard library: the console script loads it before the
command line.
"""

from __future__ import annotations

from typing import Final

__all__ = ["Terminated", "check", "clear", "received", "record"]


class Terminated(BaseException):
    """SIGTERM arrived. Not an ``Exception``: like ``KeyboardInterrupt``, it passes every
    handler of operational errors and runs every clean-up on its way out."""


#: the signals that arrived in this process since :func:`clear`
_RECEIVED: Final[list[int]] = []


def record(signum: int) -> None:
    """Note that ``signum`` arrived (the handler's first step)."""
    _RECEIVED.append(signum)


def received() -> bool:
    """Whether SIGTERM arrived since :func:`clear` (whatever became of its exception)."""
    return bool(_RECEIVED)


def clear() -> None:
    """Forget the signals that arrived (a new command)."""
    _RECEIVED.clear()


def check() -> None:
    """Raise :class:`Terminated` if SIGTERM arrived, even where its own exception was
    lost: called before an output is started and before it is published."""
    if _RECEIVED:
        raise Terminated
