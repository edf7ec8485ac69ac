"""Named report presets: the selection and correctness of a record kind, defined once.

``pw-decide-row`` (seed 004, issue 7): coverage is the share of turns the engine
answered (``engine.state == "answered"``); risk is the share of answered turns whose
preloaded tools (``engine.preloaded``) missed a tool the turn then called
(``labels.tools``), i.e. ``labels.tools ⊄ engine.preloaded``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import polars as pl

__all__ = ["PRESETS", "Preset"]


@dataclass(frozen=True)
class Preset:
    """Expressions that turn a kind's rows into (selected, correct) pairs."""

    name: str
    #: the record kind whose accepted rows the preset reads from a run directory
    kind: str
    description: str
    selected: pl.Expr
    selected_definition: str
    correct: pl.Expr
    correct_definition: str
    #: caveats printed in every report that uses the preset
    notes: tuple[str, ...] = ()


_engine = pl.col("engine")
_called = pl.col("labels").struct.field("tools")
_preloaded = _engine.struct.field("preloaded")

PRESETS: Final[dict[str, Preset]] = {
    "pw-decide-row": Preset(
        name="pw-decide-row",
        kind="pw-decide-row-1",
        description=(
            "Turn-load decisions: coverage = answered turns, risk = answered turns whose "
            "preloaded tools missed a tool the turn called."
        ),
        selected=_engine.struct.field("state") == "answered",
        selected_definition='engine.state == "answered"',
        # set_difference is empty exactly when every called tool was preloaded
        correct=_called.list.set_difference(_preloaded).list.len() == 0,
        correct_definition="every tool in labels.tools is in engine.preloaded",
        notes=(
            "Seed 004, engine.state: an answered turn carried what the engine chose, so its "
            "tool labels are not independent of the engine; the miss rate of answered turns "
            "is measured against labels the engine influenced.",
            "Partial turns (partial = true) label only their request_tools needs; pass "
            "--where 'NOT partial' to measure completed turns only.",
        ),
    ),
}
