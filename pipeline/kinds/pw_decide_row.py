"""pw-decide-row/1 (seed 004): one tool-selection turn decision as a training row."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from pipeline.kinds.base import RecordKind, register_kind
from pipeline.kinds.rules import Finding, RuleContext, Spec, record_rule
from pipeline.records.lineage import ContentFingerprint

if TYPE_CHECKING:
    from pipeline.dedupe.keys import DedupeKey

CONTENT: Final = ContentFingerprint(b"rowgate:pw-decide-row-content:v1\x00")


@register_kind
class PwDecideRow(RecordKind):
    id = "pw-decide-row-1"
    version_field = "schema"
    version_value = "pw-decide-row/1"
    idempotency_key = ("session", "receipt")
    #: seed 004 ``meta``: "consumers may group by it but never train on it" — stored apart
    #: from the training features, after the lineage columns, as ``_meta``.
    apart: ClassVar[dict[str, str]] = {"meta": "_meta"}

    def content(self, record: dict[str, Any]) -> tuple[ContentFingerprint, Sequence[str]]:
        """The decision itself: state read, options offered, engine answer, labels.

        Receipt, session ids, ``judge`` and ``meta`` are provenance, not content; ``meta``
        is never a training feature (seed 004).
        """
        return CONTENT, (
            tuple(
                ContentFingerprint.json_field(record[name])
                for name in ("state", "offered", "engine", "labels")
            )
        )

    def dedupe_key(self) -> DedupeKey:
        """The state the engine read and the options offered (as sets): one decision, so
        the same decision in train and eval is caught whatever its labels say. ``meta``
        groups (task, repository, prompt group) must not straddle splits (seed 004: "consumers
        may group by it")."""
        import polars as pl  # gate workers import polars only for dedupe row keys

        from pipeline.dedupe.keys import DedupeKey, KeyField

        offered = pl.col("offered")
        options = pl.concat_list(
            *(
                offered.struct.field(name).list.eval(pl.lit(f"{name}:") + pl.element())
                for name in ("floor", "loadable", "guides")
            )
        )
        return DedupeKey(
            "state + offered options",
            ("state", "offered"),
            (
                KeyField("state", pl.col("state")),
                KeyField("offered", options, prose=False, unordered=True),
            ),
            split_groups=("meta.task", "meta.repository", "meta.group"),
        )


# -- semantic rules: each checkable schema ``description`` of seed 004 read as a contract --


@record_rule(
    "pw-decide-row-1",
    "coordinator_is_its_own_root",
    meaning="a coordinator row's root_session is not its own session",
    spec=Spec.PW_DECIDE_ROW,
)
def coordinator_is_its_own_root(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, root_session: "The session itself, or the coordinator session a worker leg
    belongs to." A coordinator row's root session is its own session."""
    if record["host"] == "coordinator" and record["root_session"] != record["session"]:
        yield Finding("$.root_session", "a coordinator row's root_session is not its session")


@record_rule(
    "pw-decide-row-1",
    "worker_has_a_coordinator",
    meaning="a worker row names its own session as root_session",
    spec=Spec.PW_DECIDE_ROW,
)
def worker_has_a_coordinator(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, root_session: "... or the coordinator session a worker leg belongs to." A
    worker leg belongs to another (coordinator) session, never to itself."""
    if record["host"] == "worker" and record["root_session"] == record["session"]:
        yield Finding("$.root_session", "a worker row names itself as its coordinator")


@record_rule(
    "pw-decide-row-1",
    "partial_iff_no_kind",
    meaning="partial and a null labels.kind disagree",
    spec=Spec.PW_DECIDE_ROW,
)
def partial_iff_no_kind(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, partial: "The turn did not complete" and labels.kind: "null for a turn
    that did not complete": ``partial`` holds exactly when ``labels.kind`` is null."""
    if record["partial"] != (record["labels"]["kind"] is None):
        yield Finding("$.labels.kind", "partial and labels.kind disagree")


@record_rule(
    "pw-decide-row-1",
    "partial_labels_only_requests",
    meaning="a partial turn carries tool or skill labels",
    spec=Spec.PW_DECIDE_ROW,
)
def partial_labels_only_requests(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, partial: "only its request_tools needs are labels." A partial turn carries
    no called-tool or skill labels."""
    if record["partial"]:
        for field in ("tools", "skills"):
            if record["labels"][field]:
                yield Finding(
                    f"$.labels.{field}", "a partial turn carries labels besides its requests"
                )


@record_rule(
    "pw-decide-row-1",
    "tools_offered",
    meaning="a labels.tools entry is not in offered.loadable",
    spec=Spec.PW_DECIDE_ROW,
)
def tools_offered(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, labels.tools: "Offered loadable tools the turn called": a subset of
    ``offered.loadable``."""
    loadable = set(record["offered"]["loadable"])
    for i, tool in enumerate(record["labels"]["tools"]):
        if tool not in loadable:
            yield Finding(f"$.labels.tools[{i}]", "tool label not among offered.loadable")


@record_rule(
    "pw-decide-row-1",
    "guides_offered",
    meaning="a labelled guide is not in offered.guides",
    spec=Spec.PW_DECIDE_ROW,
)
def guides_offered(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, labels.guides: "Offered instruction units: needed, unneeded, or unknown
    (null)": every labelled guide is in ``offered.guides``."""
    offered = set(record["offered"]["guides"])
    if any(guide not in offered for guide in record["labels"]["guides"]):
        yield Finding("$.labels.guides.*", "guide label not among offered.guides")


@record_rule(
    "pw-decide-row-1",
    "engine_choices_offered",
    meaning="the engine preloads or omits a tool not offered as loadable, or both for one tool",
    spec=Spec.PW_DECIDE_ROW,
)
def engine_choices_offered(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, the row: "the candidates the turn offered, what the engine answered": the
    engine preloads or omits offered loadable tools only, never both for one tool."""
    loadable = set(record["offered"]["loadable"])
    engine = record["engine"]
    for field in ("preloaded", "omitted"):
        for i, tool in enumerate(engine[field]):
            if tool not in loadable:
                yield Finding(f"$.engine.{field}[{i}]", "tool not among offered.loadable")
    if set(engine["preloaded"]) & set(engine["omitted"]):
        yield Finding("$.engine.omitted", "a tool is both preloaded and omitted")


@record_rule(
    "pw-decide-row-1",
    "abstained_carries_nothing",
    meaning="an abstained turn preloaded tools",
    spec=Spec.PW_DECIDE_ROW,
)
def abstained_carries_nothing(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, engine.state: "An answered turn carried what the engine chose": a turn the
    engine abstained on carried no choice, so nothing was preloaded."""
    if record["engine"]["state"] == "abstained" and record["engine"]["preloaded"]:
        yield Finding("$.engine.preloaded", "an abstained turn preloaded tools")


@record_rule(
    "pw-decide-row-1",
    "answer_only_calls_no_tools",
    meaning="a turn labelled answer_only has tool labels",
    spec=Spec.PW_DECIDE_ROW,
)
def answer_only_calls_no_tools(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, labels.kind: "The kind the turn's tool calls imply": a turn labelled
    ``answer_only`` called no loadable tool."""
    if record["labels"]["kind"] == "answer_only" and record["labels"]["tools"]:
        yield Finding("$.labels.kind", "answer_only turn with tool labels")


@record_rule(
    "pw-decide-row-1",
    "judged_scores_name_their_judge",
    meaning="judged scores without a judge",
    spec=Spec.PW_DECIDE_ROW,
)
def judged_scores_name_their_judge(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 004, judge: "Which model judged the row's scores, and how." Rows carrying judged
    scores (requests[].scores, skill_scores) must say who judged them."""
    labels = record["labels"]
    scored = bool(labels.get("skill_scores")) or any(r.get("scores") for r in labels["requests"])
    if scored and not record.get("judge"):
        yield Finding("$.judge", "judged scores without a judge")
