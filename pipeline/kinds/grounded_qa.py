"""grounded-qa-v1 (seed 000): a question, an answer, and citations into documents."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from pipeline.dedupe.keys import DedupeKey, KeyField
from pipeline.kinds.base import RecordKind, register_kind
from pipeline.lineage import ContentFingerprint

CONTENT: Final = ContentFingerprint(b"rowgate:grounded-qa-content:v1\x00")


@register_kind
class GroundedQA(RecordKind):
    id = "grounded-qa-v1"

    def fingerprint(self, record: dict[str, Any]) -> str:
        """Domain, question, answer, abstention and the ordered citations; not the task id."""
        return CONTENT.digest(
            (
                record["domain"],
                record["question"],
                record["answer"],
                "true" if record["abstain"] else "false",
                ContentFingerprint.json_field(record["citations"]),
            )
        )

    def dedupe_key(self) -> DedupeKey:
        """The question and the *set* of cited spans (document id and offsets)."""
        span = (
            pl.element().struct.field("document_id")
            + pl.lit("#")
            + pl.element().struct.field("start").cast(pl.String)
            + pl.lit("-")
            + pl.element().struct.field("end").cast(pl.String)
        )
        return DedupeKey(
            "question + citation set",
            ("question", "citations"),
            (
                KeyField("question", pl.col("question")),
                KeyField(
                    "citations",
                    pl.col("citations").list.eval(span).list.unique(),
                    prose=False,
                    unordered=True,
                ),
            ),
        )
