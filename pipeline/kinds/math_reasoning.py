"""math-reasoning-v1 (seed 000): a problem, assumptions, a derivation and an answer."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from pipeline.kinds.base import RecordKind, register_kind
from pipeline.kinds.rules import Finding, RuleContext, Spec, folded, is_blank, record_rule
from pipeline.records.lineage import ContentFingerprint

if TYPE_CHECKING:
    from pipeline.dedupe.keys import DedupeKey

CONTENT: Final = ContentFingerprint(b"rowgate:math-reasoning-content:v1\x00")


@register_kind
class MathReasoning(RecordKind):
    id = "math-reasoning-v1"

    def content(self, record: dict[str, Any]) -> tuple[ContentFingerprint, Sequence[str]]:
        """Problem, assumptions, derivation steps and final answer; not the score or id."""
        return CONTENT, (
            (
                record["problem"],
                ContentFingerprint.json_field(record["assumptions"]),
                ContentFingerprint.json_field(record["derivation"]),
                record["final_answer"],
            )
        )

    def dedupe_key(self) -> DedupeKey:
        """Problem, derivation and answer (assumptions and the score are annotations)."""
        import polars as pl  # gate workers import polars only for dedupe row keys

        from pipeline.dedupe.keys import DedupeKey, KeyField

        return DedupeKey(
            "problem + derivation + answer",
            ("problem", "derivation", "final_answer"),
            (
                KeyField("problem", pl.col("problem")),
                KeyField("derivation", pl.col("derivation"), ordered=True),
                KeyField("answer", pl.col("final_answer")),
            ),
        )


# -- semantic rules (seed 000, "Evaluate observable derivations, assumptions, intermediate
#    claims, and final answers") ------------------------------------------------------------


@record_rule(
    "math-reasoning-v1",
    "non_blank_steps",
    meaning="a derivation step is blank",
    spec=Spec.ARCV_SCHEMAS,
)
def non_blank_steps(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: the schema "records a concise, checkable derivation": a step that is only
    whitespace satisfies ``minLength`` but records nothing checkable."""
    for i, step in enumerate(record["derivation"]):
        if is_blank(step):
            yield Finding(f"$.derivation[{i}]", "blank derivation step")


@record_rule(
    "math-reasoning-v1",
    "non_blank_answer",
    meaning="the problem or the final answer is blank",
    spec=Spec.ARCV_SCHEMAS,
)
def non_blank_answer(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Evaluate observable derivations, assumptions, intermediate claims, and
    final answers": problem and final answer must say something beyond whitespace."""
    for field in ("problem", "final_answer"):
        if is_blank(record[field]):
            yield Finding(f"$.{field}", "blank text")


@record_rule(
    "math-reasoning-v1",
    "unique_assumptions",
    meaning="assumptions repeat after folding, or one is blank",
    spec=Spec.ARCV_SCHEMAS,
)
def unique_assumptions(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000 pins ``uniqueItems`` on assumptions; this also catches repeats that differ
    only in case, Unicode form or whitespace, and blank assumptions."""
    seen: set[str] = set()
    for i, assumption in enumerate(record["assumptions"]):
        key = folded(assumption)
        if not key:
            yield Finding(f"$.assumptions[{i}]", "blank assumption")
        elif key in seen:
            yield Finding(f"$.assumptions[{i}]", "repeats an earlier assumption")
        seen.add(key)
