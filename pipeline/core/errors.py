"""The errors rowgate raises for what a user gave it, each a :class:`RowgateError`.

The command line maps them to exit codes by class (:mod:`pipeline.cli._common`).
"""

from __future__ import annotations

__all__ = ["InputError", "RowgateError"]


class RowgateError(Exception):
    """Base of every error rowgate raises for a user's input, configuration or output."""


class InputError(RowgateError, ValueError):
    """An input that cannot be read as declared (missing, corrupt, wrong compression)."""
