"""ARI replication rubric envelopes (seed 001 and ``../shared/reference/ari/``), two generations.

* ``ari-replication-rubric-3``: the generation seed 001 describes (``version: "3"``, no
  ``schema_version``, optional ``audit``, leaf ``flags``); routed by ``version``.
* ``ari-replication-rubric-v2``: the upstream ``schema_version:
  "ari.replication-rubric/v2"`` envelope (required ``repair_ledger``, evidence spans and
  verification targets on leaves, no audit or flags); routed by ``schema_version``.

``rubric_sha256`` is verified the way the upstream tool computes it (reference README,
from ``ari-skill-replicate/src/manifest.py``): SHA-256 of
``json.dumps(envelope_without_it, sort_keys=True, ensure_ascii=False,
separators=(",", ":"))`` in UTF-8 — Python's serialisation, not RFC 8785 (a float 0.0
stays ``0.0``). The seed generation also leaves ``audit`` out, so audit annotations do
not invalidate provenance.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Final

from pipeline.kinds.base import RecordKind, register_kind
from pipeline.kinds.rules import Check, Finding, RuleContext, Severity, Spec, record_rule
from pipeline.records.lineage import ContentFingerprint

__all__ = ["AriRubric3", "AriRubricV2", "leaves", "rubric_sha256", "walk_nodes"]

CONTENT: Final = ContentFingerprint(b"rowgate:ari-replication-rubric-content:v1\x00")
SEED_KIND: Final = "ari-replication-rubric-3"
V2_KIND: Final = "ari-replication-rubric-v2"
_UUID: Final = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-([0-9a-f])[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
)
#: fields the seed marks "LEAF のみ" (leaf only), plus v2's leaf evidence fields
_LEAF_ONLY: Final = (
    "task_category",
    "finegrained_task_category",
    "rationale_from_paper",
    "flags",
    "evidence_span",
    "verification",
)
#: seed 001: "flagged leaf が >20% の場合、 監査者は再生成を推奨する"
FLAGGED_SHARE_LIMIT: Final = 0.20


def rubric_sha256(envelope: dict[str, Any], excluded: tuple[str, ...]) -> str:
    """The upstream canonical digest of an envelope, leaving out ``excluded`` keys."""
    body = {k: v for k, v in envelope.items() if k not in excluded}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def walk_nodes(
    node: dict[str, Any], path: str = "$.rubric"
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every task node with its safe path, root first (iterative: trees can be deep)."""
    stack = [(path, node)]
    while stack:
        here, current = stack.pop()
        yield here, current
        children = current.get("sub_tasks") or []
        stack.extend(
            (f"{here}.sub_tasks[{i}]", child) for i, child in reversed(list(enumerate(children)))
        )


def leaves(node: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    return ((p, n) for p, n in walk_nodes(node) if not n.get("sub_tasks"))


class _AriRubric(RecordKind):
    #: keys left out of the rubric_sha256 computation
    digest_excludes: ClassVar[tuple[str, ...]]
    #: UUID version node ids must have (None: any RFC 4122 UUID)
    uuid_version: ClassVar[str | None]
    idempotency_key = ()  # envelopes have no submission identity of their own

    def content(self, record: dict[str, Any]) -> tuple[ContentFingerprint, Sequence[str]]:
        """The paper, the rubric tree and the reproduce contract; not generator provenance."""
        return CONTENT, (
            (
                record["paper_sha256"],
                ContentFingerprint.json_field(record["rubric"]),
                ContentFingerprint.json_field(record["reproduce_contract"]),
            )
        )


@register_kind
class AriRubric3(_AriRubric):
    id = SEED_KIND
    version_field = "version"
    version_value = "3"
    digest_excludes = ("rubric_sha256", "audit")
    uuid_version = "4"


@register_kind
class AriRubricV2(_AriRubric):
    id = V2_KIND
    version_field = "schema_version"
    version_value = "ari.replication-rubric/v2"
    digest_excludes = ("rubric_sha256",)
    uuid_version = None


def _kind(record: dict[str, Any]) -> type[_AriRubric]:
    return AriRubricV2 if "schema_version" in record else AriRubric3


def _both(
    name: str, meaning: str, severity: Severity = Severity.REJECT
) -> Callable[[Check], Check]:
    """Register one check as a rule of both generations, each from its own spec."""

    def register(check: Check) -> Check:
        record_rule(SEED_KIND, name, severity, meaning=meaning, spec=Spec.ARI_RUBRIC_3)(check)
        record_rule(V2_KIND, name, severity, meaning=meaning, spec=Spec.ARI_RUBRIC_V2)(check)
        return check

    return register


@_both(
    "rubric_sha256",
    "rubric_sha256 differs from the envelope's digest in the upstream tool's canonical form",
)
def rubric_sha256_matches(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 001: "rubric_sha256 ... 自己除外、 canonical-JSON の sha256" and "rubric_sha256 は自分
    自身と post-freeze の audit フィールドを除外する"; reference README: the canonical form is
    ``json.dumps(..., sort_keys=True, ensure_ascii=False, separators=(",", ":"))``."""
    kind = _kind(record)
    if rubric_sha256(record, kind.digest_excludes) != record["rubric_sha256"]:
        yield Finding("$.rubric_sha256", "does not match the envelope's canonical digest")


@_both(
    "unique_node_ids",
    "a task node id repeats in the tree",
)
def unique_node_ids(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 001: TaskNode ``id`` is a "<uuid v4>" naming one node: ids are unique in the tree."""
    seen: set[str] = set()
    for path, node in walk_nodes(record["rubric"]):
        if node["id"] in seen:
            yield Finding(f"{path}.id", "node id repeats another node's id")
        seen.add(node["id"])


@_both(
    "node_ids_are_uuids",
    "a node id is not a canonical lowercase UUID (version 4 for version 3 envelopes)",
)
def node_ids_are_uuids(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 001: ``"id": "<uuid v4>"``; the v2 schema: ``"format": "uuid"`` (an annotation,
    so checked here): canonical lowercase RFC 4122 form, version 4 for the seed generation."""
    version = _kind(record).uuid_version
    for path, node in walk_nodes(record["rubric"]):
        match = _UUID.match(node["id"])
        if match is None or (version is not None and match.group(1) != version):
            yield Finding(
                f"{path}.id", "not a " + (f"version {version} " if version else "") + "UUID"
            )


@_both(
    "leaf_only_fields",
    "an internal node carries a leaf-only field",
)
def leaf_only_fields(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 001: task_category, finegrained_task_category, rationale_from_paper are marked
    "LEAF のみ" (leaf only); flags annotate leaves. Internal nodes carry none of them (v2
    allows an explicit null category there, which is not a value)."""
    for path, node in walk_nodes(record["rubric"]):
        if node.get("sub_tasks"):
            for field in _LEAF_ONLY:
                if node.get(field) not in (None, []):
                    yield Finding(f"{path}.{field}", "leaf-only field on an internal node")


@_both(
    "weighted_children",
    "a node's children's weights sum to zero",
)
def weighted_children(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 001: "score(node) = sum(w_i * score(child_i)) / sum(w_i)": a node whose
    children's weights sum to zero has no score."""
    for path, node in walk_nodes(record["rubric"]):
        children = node.get("sub_tasks") or []
        if children and sum(child["weight"] for child in children) == 0:
            yield Finding(f"{path}.sub_tasks", "children's weights sum to zero")


@record_rule(
    SEED_KIND,
    "flagged_leaves_share",
    Severity.WARN,
    meaning="more than 20 % of the leaves are flagged: regenerating is recommended",
    spec=Spec.ARI_RUBRIC_3,
)
def flagged_leaves_share(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 001: "flagged leaf が >20% の場合、 監査者は再生成を推奨する" (more than 20 % of
    leaves flagged: the auditor recommends regenerating). A warning on an accepted row."""
    all_leaves = [n for _, n in leaves(record["rubric"])]
    flagged = sum(1 for n in all_leaves if n.get("flags"))
    if all_leaves and flagged / len(all_leaves) > FLAGGED_SHARE_LIMIT:
        yield Finding(
            "$.rubric", f"{flagged} of {len(all_leaves)} leaves flagged: regenerate recommended"
        )


@record_rule(
    V2_KIND,
    "evidence_span_range",
    meaning="a paper-span evidence span is empty or cites another paper",
    spec=Spec.ARI_RUBRIC_V2,
)
def evidence_span_range(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Reference v2 schema, evidence_span ``paper-span``: ``start_char``/``end_char`` locate a
    quote in the paper whose digest is ``paper_sha256``: the span is non-empty and points
    into the envelope's own paper."""
    for path, node in walk_nodes(record["rubric"]):
        span = node.get("evidence_span")
        if not span or span.get("kind") != "paper-span":
            continue
        if span["end_char"] <= span["start_char"]:
            yield Finding(f"{path}.evidence_span.end_char", "end_char is not after start_char")
        if span["paper_sha256"] != record["paper_sha256"]:
            yield Finding(f"{path}.evidence_span.paper_sha256", "span cites another paper")
