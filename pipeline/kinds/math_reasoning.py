"""math-reasoning-v1 (seed 000): a problem, assumptions, a derivation and an answer."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from pipeline.dedupe.keys import DedupeKey, KeyField
from pipeline.kinds.base import RecordKind, register_kind
from pipeline.lineage import ContentFingerprint

CONTENT: Final = ContentFingerprint(b"rowgate:math-reasoning-content:v1\x00")


@register_kind
class MathReasoning(RecordKind):
    id = "math-reasoning-v1"

    def fingerprint(self, record: dict[str, Any]) -> str:
        """Problem, assumptions, derivation steps and final answer; not the score or id."""
        return CONTENT.digest(
            (
                record["problem"],
                ContentFingerprint.json_field(record["assumptions"]),
                ContentFingerprint.json_field(record["derivation"]),
                record["final_answer"],
            )
        )

    def dedupe_key(self) -> DedupeKey:
        """Problem, derivation and answer (assumptions and the score are annotations)."""
        return DedupeKey(
            "problem + derivation + answer",
            ("problem", "derivation", "final_answer"),
            (
                KeyField("problem", pl.col("problem")),
                KeyField("derivation", pl.col("derivation").list.join("\n")),
                KeyField("answer", pl.col("final_answer")),
            ),
        )
