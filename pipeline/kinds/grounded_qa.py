"""grounded-qa-v1 (seed 000): a question, an answer, and citations into documents."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from pipeline.kinds.base import RecordKind, register_kind
from pipeline.kinds.rules import Finding, RuleContext, Spec, record_rule, unknown
from pipeline.records.lineage import ContentFingerprint

if TYPE_CHECKING:
    from pipeline.dedupe.keys import DedupeKey

CONTENT: Final = ContentFingerprint(b"rowgate:grounded-qa-content:v1\x00")


@register_kind
class GroundedQA(RecordKind):
    id = "grounded-qa-v1"

    def content(self, record: dict[str, Any]) -> tuple[ContentFingerprint, Sequence[str]]:
        """Domain, question, answer, abstention and the ordered citations; not the task id."""
        return CONTENT, (
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
        import polars as pl  # gate workers import polars only for dedupe row keys

        from pipeline.dedupe.keys import DedupeKey, KeyField

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


# -- semantic rules (seed 000, "The service must verify `end > start`, define offsets
#    against a versioned text representation, confirm quoted text") ----------------------
# Offsets count Unicode code points of the document text as stored in the documents table
# (Python str indices), the representation the table's sha256 pins.


@record_rule(
    "grounded-qa-v1",
    "span_order",
    meaning="a citation's end is not after its start",
    spec=Spec.ARCV_SCHEMAS,
)
def span_order(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "The service must verify `end > start`" ("The schema alone does not
    establish `end > start`")."""
    for i, citation in enumerate(record["citations"]):
        if citation["end"] <= citation["start"]:
            yield Finding(f"$.citations[{i}].end", "end is not after start")


def _citations_with_documents(
    record: dict[str, Any], ctx: RuleContext
) -> Iterator[tuple[int, dict[str, Any], Any]]:
    for i, citation in enumerate(record["citations"]):
        document = ctx.documents.get(citation["document_id"]) if ctx.documents is not None else None
        yield i, citation, document


@record_rule(
    "grounded-qa-v1",
    "document_digest",
    meaning="a cited document is not in the documents table or has another digest (without the table: quarantined)",
    spec=Spec.ARCV_SCHEMAS,
)
def document_digest(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "A production service must retrieve the authorized document version, check
    its digest". The cited document exists in the documents table and the citation's
    ``document_sha256`` is that version's digest. Without the table: unknown → quarantine."""
    if record["citations"] and ctx.documents is None:
        yield unknown("no documents table configured")
        return
    for i, citation, document in _citations_with_documents(record, ctx):
        if document is None:
            yield Finding(f"$.citations[{i}].document_id", "document not in the documents table")
        elif document.sha256 != citation["document_sha256"]:
            yield Finding(
                f"$.citations[{i}].document_sha256", "digest differs from the document version"
            )


@record_rule(
    "grounded-qa-v1",
    "span_in_document",
    meaning="a citation's span ends beyond the document text (without the table: quarantined)",
    spec=Spec.ARCV_SCHEMAS,
)
def span_in_document(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "define the span coordinate system": offsets are code points of the
    stored text and must lie inside it. Without the table: unknown → quarantine."""
    if record["citations"] and ctx.documents is None:
        yield unknown("no documents table configured")
        return
    for i, citation, document in _citations_with_documents(record, ctx):
        if document is not None and citation["end"] > len(document.text):
            yield Finding(f"$.citations[{i}].end", "span ends beyond the document text")


@record_rule(
    "grounded-qa-v1",
    "quote_matches_span",
    meaning="a quote differs from the cited span of the document (without the table: quarantined)",
    spec=Spec.ARCV_SCHEMAS,
)
def quote_matches_span(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "verify that the quoted bytes or characters correspond to the stated
    range" ("confirm quoted text"). Without the table: unknown → quarantine."""
    if record["citations"] and ctx.documents is None:
        yield unknown("no documents table configured")
        return
    for i, citation, document in _citations_with_documents(record, ctx):
        if (
            document is None
            or citation["end"] <= citation["start"]
            or citation["end"] > len(document.text)
        ):
            continue  # reported by the rules above
        # int: the schema's integers admit 60.0, which a slice refuses (an internal error)
        start, end = int(citation["start"]), int(citation["end"])
        if document.text[start:end] != citation["quote"]:
            yield Finding(f"$.citations[{i}].quote", "quote differs from the cited span")
