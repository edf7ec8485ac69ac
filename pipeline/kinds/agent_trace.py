"""agent-trace-v1 (seed 000): a retrieval agent's prompt, tool calls and final answer."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from pipeline.kinds.base import RecordKind, register_kind
from pipeline.kinds.rules import Finding, RuleContext, Spec, record_rule, unknown
from pipeline.records.lineage import ContentFingerprint

if TYPE_CHECKING:
    from pipeline.dedupe.keys import DedupeKey

CONTENT: Final = ContentFingerprint(b"rowgate:agent-trace-content:v1\x00")


@register_kind
class AgentTrace(RecordKind):
    id = "agent-trace-v1"

    def content(self, record: dict[str, Any]) -> tuple[ContentFingerprint, Sequence[str]]:
        """Prompt, the ordered calls (tool, arguments, result) and the final answer.

        Identity and transport fields (task id, call ids, reported latency) are left out:
        they do not change what the trace says.
        """
        calls = [[s["tool"], s["arguments"], s["result"]] for s in record["steps"]]
        return CONTENT, (
            (record["prompt"], ContentFingerprint.json_field(calls), record["final_answer"])
        )

    def dedupe_key(self) -> DedupeKey:
        """The prompt and the call sequence (tool and arguments, in order); call ids,
        latencies and results are how one run went, not what was asked and done."""
        import polars as pl  # gate workers import polars only for dedupe row keys

        from pipeline.dedupe.keys import DedupeKey, KeyField

        call = (
            pl.element().struct.field("tool")
            + pl.lit(" ")
            + pl.element().struct.field("arguments").struct.json_encode()
        )
        return DedupeKey(
            "prompt + call sequence",
            ("prompt", "steps"),
            (
                KeyField("prompt", pl.col("prompt")),
                KeyField("calls", pl.col("steps").list.eval(call), ordered=True),
            ),
        )


# -- semantic rules (seed 000, "Validate call-ID uniqueness and document authorization
#    separately" and "Multi-turn tool-calling invariants") --------------------------------

_CALL_NUMBER = re.compile(r"^call-([0-9]+)$")
_TOKEN = re.compile(r"[^\s,;()\[\]{}<>\"'`]+")


@record_rule(
    "agent-trace-v1",
    "unique_call_ids",
    meaning="a call_id repeats within the trace",
    spec=Spec.ARCV_SCHEMAS,
)
def unique_call_ids(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Validate call-ID uniqueness and document authorization separately" and
    "Validate that call IDs are unique"."""
    seen: set[str] = set()
    for i, step in enumerate(record["steps"]):
        if step["call_id"] in seen:
            yield Finding(f"$.steps[{i}].call_id", "call id repeats an earlier call")
        seen.add(step["call_id"])


@record_rule(
    "agent-trace-v1",
    "call_order",
    meaning="call numbers go down: a result would precede its call",
    spec=Spec.ARCV_SCHEMAS,
)
def call_order(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Validate that ... results do not precede their calls." Steps carry their
    results inline, so the recorded order must be the call order: call numbers never go
    down (a repeated number is ``unique_call_ids``'s finding)."""
    previous: tuple[int, str] = (-1, "")
    for i, step in enumerate(record["steps"]):
        match = _CALL_NUMBER.match(step["call_id"])
        # compared as (length, digits), never int(): a schema without the shipped bound on
        # call ids lets through numbers past Python's int-conversion limit
        digits = match.group(1).lstrip("0") if match else ""
        number = (len(digits), digits) if match else (-1, "")
        if number < previous:
            yield Finding(f"$.steps[{i}].call_id", "call recorded out of order")
            return
        previous = number


@record_rule(
    "agent-trace-v1",
    "failed_call_without_results",
    meaning="a failed call returned documents",
    spec=Spec.ARCV_SCHEMAS,
)
def failed_call_without_results(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "a final answer does not claim a failed tool produced successful evidence".
    A call that failed cannot have returned documents."""
    for i, step in enumerate(record["steps"]):
        if not step["result"]["success"] and step["result"]["document_ids"]:
            yield Finding(
                f"$.steps[{i}].result.document_ids", "a failed call lists returned documents"
            )


@record_rule(
    "agent-trace-v1",
    "evidence_from_successful_calls",
    meaning="the final answer cites a document no successful call returned",
    spec=Spec.ARCV_SCHEMAS,
)
def evidence_from_successful_calls(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "ensure ... a final answer does not claim a failed tool produced
    successful evidence." A document id the final answer cites must have been returned by
    a successful call of the trace. Known ids: those in any call's results, plus the
    authorised-documents table when the campaign has one; the answer is split into tokens
    so the check costs the same for a table of ten ids or ten million."""
    returned = {
        d for s in record["steps"] if s["result"]["success"] for d in s["result"]["document_ids"]
    }
    cited = {t.rstrip(".:") for t in _TOKEN.findall(record["final_answer"])} - returned
    if not cited:
        return
    known = {d for s in record["steps"] for d in s["result"]["document_ids"]}
    authorised = ctx.authorised_documents or frozenset()
    if any(t in known or t in authorised for t in cited):
        yield Finding("$.final_answer", "cites a document no successful call returned")


@record_rule(
    "agent-trace-v1",
    "authorised_documents",
    meaning="a returned document is not in the authorised-documents table (without the table: quarantined)",
    spec=Spec.ARCV_SCHEMAS,
)
def authorised_documents(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Disallow undeclared tools and unauthorized document references." Every
    returned document id must be in the campaign's authorised-documents table; without
    that table the rule cannot decide (unknown → quarantine), it never passes silently."""
    ids = [
        (i, j, d)
        for i, s in enumerate(record["steps"])
        for j, d in enumerate(s["result"]["document_ids"])
    ]
    if not ids:
        return
    if ctx.authorised_documents is None:
        yield unknown("no authorised-documents table configured")
        return
    for i, j, doc_id in ids:
        if doc_id not in ctx.authorised_documents:
            yield Finding(f"$.steps[{i}].result.document_ids[{j}]", "document id not authorised")


@record_rule(
    "agent-trace-v1",
    "aggregate_size",
    meaning="prompt, queries and final answer together exceed rules.max_trace_chars",
    spec=Spec.ARCV_SCHEMAS,
)
def aggregate_size(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Bound aggregate conversation size as well as individual fields." The
    prompt, every query and the final answer together stay within
    ``rules.max_trace_chars`` characters."""
    limit = ctx.settings.max_trace_chars
    total = len(record["prompt"]) + len(record["final_answer"])
    total += sum(len(s["arguments"]["query"]) for s in record["steps"])
    if total > limit:
        yield Finding("$", f"trace text totals {total} characters, the bound is {limit}")
