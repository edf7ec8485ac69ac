"""autoqa-eval-1 (the AutoQA evaluation contract): one automated evaluator's output document.

The schema (``schemas/autoqa-eval-1.schema.json``) fixes the document's shape; the rules
below are the specification's §21 cross-document integrity checks that one document and
the campaign's contracts table (``references.contracts``) can decide, plus the §8.7, §8.8
and §19 invariants a document states about itself. Without the contracts table a rule
that needs it reports ``unknown`` (quarantine): it never passes silently.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final, TypeGuard

from pipeline.core.reasons import Spec
from pipeline.kinds.base import RecordKind, register_kind
from pipeline.kinds.rules import Finding, RuleContext, record_rule, unknown
from pipeline.records.lineage import ContentFingerprint

__all__ = ["COMPOSITE_POLICIES", "NEEDS_CONTRACTS", "Contract", "find_cycle", "parse_contracts"]

KIND: Final = "autoqa-eval-1"
CONTENT: Final = ContentFingerprint(b"rowgate:autoqa-eval-content:v1\x00")
#: composite-case policies rowgate can decide (the contracts table's ``compositePolicy``)
COMPOSITE_POLICIES: Final = ("most_severe",)
#: §8.12 decision effects from least to most severe; ``escalate`` is no point on this
#: scale (nothing was decided), see :func:`_most_severe`
_ACTION_ORDER: Final = ("accept", "accept_with_note", "rework", "reject")
#: codes of the rules that read the contracts table (unknown without it)
NEEDS_CONTRACTS: Final[list[str]] = [
    f"semantic.{KIND}.contract_resolves",
    f"semantic.{KIND}.proof_invariants",
]


@register_kind
class AutoQAEvaluation(RecordKind):
    id = KIND
    version_field = "schemaVersion"
    version_value = "autoqa-evaluation/0.1.0"
    idempotency_key = ("evaluationId",)

    def content(self, record: dict[str, Any]) -> tuple[ContentFingerprint, Sequence[str]]:
        """What was evaluated under which contract, and what the evaluation concluded: the
        case and contract references, the observation plane, the assessments and the
        decisions. The evaluation id and the status are identity and lifecycle, not
        content: one evaluation exported twice under two ids is one evaluation."""
        case, contract = record["caseRef"], record["contractRef"]
        return CONTENT, (
            case["caseSha256"],
            contract["contractId"],
            contract["contractVersion"],
            contract["contractSha256"],
            *(
                ContentFingerprint.json_field(record[name])
                for name in ("claims", "expectedElements", "relationships", "decisions")
            ),
            ContentFingerprint.json_field(_confidences_as_text(record["findings"])),
            ContentFingerprint.json_field(_confidences_as_text(record["criterionAssessments"])),
        )


#: the only numbers of a document that may be fractions: in the fingerprint they are
#: written as ``repr(float(x))``, so its canonical JSON takes orjson's path (a float
#: anywhere sends RFC 8785 serialization through pure Python, ~2 ms for a 7 KB document)
_CONFIDENCES: Final = frozenset({"confidence", "rawConfidence", "calibratedConfidence"})


def _confidences_as_text(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: repr(float(v)) if k in _CONFIDENCES and v is not None else v for k, v in i.items()}
        for i in items
    ]


# -- the contracts table --------------------------------------------------------------


@dataclass(frozen=True)
class Contract:
    """The parts of one approved-or-not contract version the rules consult."""

    contract_id: str
    version: str
    sha256: str
    status: str
    targets: frozenset[str]
    #: criterionId -> whether §8.8 positive proof is required
    positive_proof: Mapping[str, bool]
    #: criterionId -> permitted evidence classes; ``None``: the contract does not restrict
    permitted: Mapping[str, frozenset[str] | None]
    #: ruleId -> the decision target it belongs to
    rules: Mapping[str, str]
    composite_policy: str | None


def find_cycle(edges: Iterable[tuple[str, str]]) -> list[str] | None:
    """A cycle of the directed graph ``edges`` (as the nodes along it), or ``None``."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(graph[start])]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(graph[nxt]))
    return None


def _strings(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def parse_contracts(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], Contract]:
    """Contracts by (contractId, contractVersion), checked as §8 and §21 ask of a contract:
    unique ids, rules targeting declared targets, dependencies naming its criteria, and
    acyclic precedence and dependency graphs ("Circular precedence MUST be rejected during
    contract validation"). A defect raises :class:`ValueError` naming the contract."""
    found: dict[tuple[str, str], Contract] = {}
    for row in rows:
        contract = _parse_contract(row)
        key = (contract.contract_id, contract.version)
        if key in found:
            raise ValueError(f"contract {key[0]!r} {key[1]} is listed twice")
        found[key] = contract
    return found


def _parse_contract(row: dict[str, Any]) -> Contract:
    contract_id, version = row.get("contractId"), row.get("contractVersion")
    if not (isinstance(contract_id, str) and contract_id and isinstance(version, str) and version):
        raise ValueError("every row needs a string contractId and contractVersion")
    name = f"contract {contract_id!r} {version}"
    criteria, rules = row.get("criteria"), row.get("rules")
    targets, precedence = row.get("decisionTargets"), row.get("precedence", [])
    sha256, status = row.get("contractSha256"), row.get("status")
    if not (
        isinstance(sha256, str)
        and isinstance(status, str)
        and _strings(targets)
        and isinstance(criteria, list)
        and isinstance(rules, list)
        and isinstance(precedence, list)
    ):
        raise ValueError(
            f"{name}: needs contractSha256, status, decisionTargets, criteria and rules"
        )
    declared = frozenset(targets)
    proof: dict[str, bool] = {}
    permitted: dict[str, frozenset[str] | None] = {}
    depends: list[tuple[str, str]] = []
    for c in criteria:
        cid = c.get("criterionId") if isinstance(c, dict) else None
        if not isinstance(cid, str) or cid in proof:
            raise ValueError(f"{name}: criteria need distinct string criterionIds")
        classes, after = c.get("permittedEvidenceClasses"), c.get("dependsOn", [])
        if classes is not None and not _strings(classes):
            raise ValueError(f"{name}: {cid}.permittedEvidenceClasses must list strings")
        if not _strings(after):
            raise ValueError(f"{name}: {cid}.dependsOn must list criterion ids")
        proof[cid] = c.get("positiveProofRequired") is True
        permitted[cid] = None if classes is None else frozenset(classes)
        depends += [(cid, d) for d in after]
    ranks = [
        (p["higher"], p["lower"])
        for p in precedence
        if isinstance(p, dict)
        and isinstance(p.get("higher"), str)
        and isinstance(p.get("lower"), str)
    ]
    if len(ranks) != len(precedence):
        raise ValueError(f"{name}: precedence entries are objects {{higher, lower}}")
    # two graphs, each acyclic: "warrant depends on grounding" and "grounding takes
    # precedence over warrant" point opposite ways without contradicting each other
    for graph, edges in (("dependency", depends), ("precedence", ranks)):
        if any(a not in proof or b not in proof for a, b in edges):
            raise ValueError(f"{name}: a {graph} names an unknown criterion")
        cycle = find_cycle(edges)
        if cycle is not None:
            raise ValueError(f"{name}: circular {graph}: {' -> '.join(cycle)}")
    by_rule: dict[str, str] = {}
    for r in rules:
        rid, target = (r.get("ruleId"), r.get("target")) if isinstance(r, dict) else (None, None)
        if not isinstance(rid, str) or rid in by_rule or not isinstance(target, str):
            raise ValueError(f"{name}: rules need distinct string ruleIds and targets")
        if target not in declared:
            raise ValueError(f"{name}: rule {rid!r} targets an undeclared decision target")
        by_rule[rid] = target
    policy = row.get("compositePolicy")
    if policy is not None and policy not in COMPOSITE_POLICIES:
        raise ValueError(f"{name}: compositePolicy must be one of {COMPOSITE_POLICIES}")
    return Contract(
        contract_id, version, sha256, status, declared, proof, permitted, by_rule, policy
    )


_NO_TABLE: Final = "no contracts table configured (references.contracts)"


def _contract(record: dict[str, Any], ctx: RuleContext) -> Contract | Finding | None:
    """The referenced contract; an ``unknown`` finding without the table; ``None`` when
    the table does not hold it (``contract_resolves`` reports that)."""
    if ctx.contracts is None:
        return unknown(_NO_TABLE)
    ref = record["contractRef"]
    return ctx.contracts.get((ref["contractId"], ref["contractVersion"]))


# -- identifiers and references within the document -----------------------------------


def _artifacts(record: dict[str, Any]) -> dict[str, str]:
    """Artifact id -> its exact content: the attempt and every evidence item."""
    found = {e["evidenceId"]: e["content"] for e in record["evidence"]}
    found.setdefault(record["attempt"]["artifactId"], record["attempt"]["content"])
    return found


def _ids(record: dict[str, Any], collection: str, field: str) -> set[str]:
    return {item[field] for item in record[collection]}


#: where a document quotes spans: (collection, the list of spans of each item)
_SPAN_LISTS: Final = (
    ("claims", "spans"),
    ("expectedElements", "observedSpans"),
    ("relationships", "evidenceSpans"),
    ("findings", "targetSpans"),
)


def _spans(record: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every quoted span of the document with its path."""
    for collection, field in _SPAN_LISTS:
        for i, item in enumerate(record[collection]):
            for j, span in enumerate(item[field]):
                yield f"$.{collection}[{i}].{field}[{j}]", span


@record_rule(
    KIND,
    "unique_ids",
    meaning="an artifact, claim, expected-element, relationship or finding id repeats (one namespace: a relationship's subject may be any of the last three), a criterion is assessed twice, or a target has two decisions of one stage",
    spec=Spec.AUTOQA,
)
def unique_ids(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §21: "no duplicate identifiers exist within a document". Artifact,
    claim, expected-element, relationship and finding ids share one namespace (a
    relationship's subject may be any of the last three); a criterion is assessed once;
    a target has at most one decision per stage."""
    seen: set[str] = set()
    named = [("$.attempt.artifactId", record["attempt"]["artifactId"])]
    for collection, field in (
        ("evidence", "evidenceId"),
        ("claims", "claimId"),
        ("expectedElements", "elementId"),
        ("relationships", "relationshipId"),
        ("findings", "findingId"),
    ):
        named += [
            (f"$.{collection}[{i}].{field}", x[field]) for i, x in enumerate(record[collection])
        ]
    for path, value in named:
        if value in seen:
            yield Finding(path, "identifier repeats an earlier one")
        seen.add(value)
    assessed: set[str] = set()
    for i, a in enumerate(record["criterionAssessments"]):
        if a["criterionId"] in assessed:
            yield Finding(f"$.criterionAssessments[{i}].criterionId", "criterion assessed twice")
        assessed.add(a["criterionId"])
    decided: set[tuple[str, str]] = set()
    for i, d in enumerate(record["decisions"]):
        if (d["target"], d["stage"]) in decided:
            yield Finding(f"$.decisions[{i}].target", "a second decision for this target and stage")
        decided.add((d["target"], d["stage"]))


def _dangling(
    record: dict[str, Any], collection: str, field: str, known: set[str], what: str
) -> Iterator[Finding]:
    """A finding for every id listed in ``record[collection][*][field]`` not in ``known``."""
    for i, item in enumerate(record[collection]):
        for j, ref in enumerate(item[field]):
            if ref not in known:
                yield Finding(f"$.{collection}[{i}].{field}[{j}]", f"no such {what}")


@record_rule(
    KIND,
    "finding_refs_exist",
    meaning="an assessment cites a finding the document does not hold",
    spec=Spec.AUTOQA,
)
def finding_refs_exist(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §21: "every finding identifier referenced by an assessment exists"."""
    findings = _ids(record, "findings", "findingId")
    yield from _dangling(record, "criterionAssessments", "findingIds", findings, "finding")


@record_rule(
    KIND,
    "claim_element_refs_exist",
    meaning="a finding cites a claim or expected element the document does not hold",
    spec=Spec.AUTOQA,
)
def claim_element_refs_exist(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §21: "every claim and expected-element identifier referenced by a
    finding exists"."""
    claims = _ids(record, "claims", "claimId")
    yield from _dangling(record, "findings", "claimIds", claims, "claim")
    elements = _ids(record, "expectedElements", "elementId")
    yield from _dangling(record, "findings", "elementIds", elements, "expected element")


@record_rule(
    KIND,
    "relationship_refs_exist",
    meaning="a relationship's subject is no claim, element or finding of the document",
    spec=Spec.AUTOQA,
)
def relationship_refs_exist(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §10.4: "Each relationship links a claim, expected element, or
    finding to a specific evidence artifact": its subject exists in the document."""
    subjects = (
        _ids(record, "claims", "claimId")
        | _ids(record, "expectedElements", "elementId")
        | _ids(record, "findings", "findingId")
    )
    for i, rel in enumerate(record["relationships"]):
        if rel["subjectId"] not in subjects:
            yield Finding(f"$.relationships[{i}].subjectId", "no such claim, element or finding")


@record_rule(
    KIND,
    "evidence_refs_exist",
    meaning="a claim, relationship or finding cites evidence not in the bundle",
    spec=Spec.AUTOQA,
)
def evidence_refs_exist(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §21: "every evidence identifier exists": evidence cited by a claim,
    linked by a relationship or used by a finding is an item of the evidence bundle."""
    evidence = _ids(record, "evidence", "evidenceId")
    yield from _dangling(record, "claims", "citedEvidenceIds", evidence, "evidence")
    for i, rel in enumerate(record["relationships"]):
        if rel["evidenceId"] not in evidence:
            yield Finding(f"$.relationships[{i}].evidenceId", "no such evidence")
    yield from _dangling(record, "findings", "evidenceIds", evidence, "evidence")


@record_rule(
    KIND,
    "span_in_artifact",
    meaning="a span names no artifact of the document, or its quote does not occur in that artifact",
    spec=Spec.AUTOQA,
)
def span_in_artifact(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §21: "every quoted span belongs to the declared artifact": the
    span names the attempt or an evidence item, and its quote occurs in that content."""
    artifacts = _artifacts(record)
    for path, span in _spans(record):
        content = artifacts.get(span["artifactId"])
        if content is None:
            yield Finding(f"{path}.artifactId", "no such artifact")
        elif span["quote"] not in content:
            yield Finding(f"{path}.quote", "quote does not occur in the artifact")


@record_rule(
    KIND,
    "span_offsets_match",
    meaning="a span's offsets miss one end, lie outside the artifact, or `content[start:end]` is not the quote",
    spec=Spec.AUTOQA,
)
def span_offsets_match(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §21: "character offsets, when present, match the quoted text".
    Offsets count Unicode code points of the artifact's content; start and end come
    together, ``start < end <= len(content)``, and ``content[start:end]`` is the quote."""
    artifacts = _artifacts(record)
    for path, span in _spans(record):
        start, end = span["start"], span["end"]
        content = artifacts.get(span["artifactId"])
        if (start is None and end is None) or content is None:
            continue  # no offsets, or no artifact (span_in_artifact's finding)
        if start is None or end is None or not start < end <= len(content):
            yield Finding(f"{path}.end", "offsets missing one end or outside the artifact")
        elif content[int(start) : int(end)] != span["quote"]:  # the schema admits 3.0
            yield Finding(f"{path}.quote", "quote differs from the text at its offsets")


@record_rule(
    KIND,
    "content_hashes",
    meaning="an artifact's `contentSha256` is not the SHA-256 of its exact UTF-8 content",
    spec=Spec.AUTOQA,
)
def content_hashes(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §20: "RECEIVED +- validate hashes and schemas" and §9.2/§9.3 (exact
    content and content hash): each artifact's contentSha256 is the SHA-256 of its exact
    UTF-8 content (§7.1: "Exact text artifacts are hashed as their exact UTF-8 content")."""
    items = [("$.attempt", record["attempt"])]
    items += [(f"$.evidence[{i}]", e) for i, e in enumerate(record["evidence"])]
    for path, item in items:
        if hashlib.sha256(item["content"].encode("utf-8")).hexdigest() != item["contentSha256"]:
            yield Finding(f"{path}.contentSha256", "not the SHA-256 of the content")


@record_rule(
    KIND,
    "acyclic_dependencies",
    meaning="the assessments' `dependsOn` graph has a cycle",
    spec=Spec.AUTOQA,
)
def acyclic_dependencies(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §21: "precedence and dependency graphs are acyclic unless a
    documented fixed-point policy exists" (rowgate knows none): the assessments'
    ``dependsOn`` graph has no cycle."""
    edges = [(a["criterionId"], d) for a in record["criterionAssessments"] for d in a["dependsOn"]]
    cycle = find_cycle(edges)
    if cycle is not None:
        at = next(
            i for i, a in enumerate(record["criterionAssessments"]) if a["criterionId"] == cycle[0]
        )
        yield Finding(
            f"$.criterionAssessments[{at}].dependsOn", f"a dependency cycle of {len(cycle) - 1}"
        )


#: The schema's form of a time (RFC 3339 with an offset, up to nine fractional digits).
_TIME: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(?:Z|([+-])([0-9]{2}):([0-9]{2}))"
)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _instant(text: str) -> tuple[int, int, int] | None:
    """A time as an instant that compares exactly: its UTC second since the epoch, 1 for
    a leap second (``23:59:60``, after ``:59`` and before the next minute, as RFC 3339
    allows), and its nanoseconds; ``None`` for no calendar instant (month 13). Read with
    ``datetime.fromisoformat``, the digits past the sixth were dropped (``…00.0000009Z``
    and ``…00.0000001Z`` were one instant) and a leap second was refused."""
    found = _TIME.fullmatch(text)
    if found is None:
        return None
    year, month, day, hour, minute, second, digits, sign, off_h, off_m = found.groups()
    leap = int(second) == 60
    if int(off_m or 0) > 59:
        return None
    try:
        offset = timedelta(hours=int(off_h or 0), minutes=int(off_m or 0))
        zone = timezone(-offset if sign == "-" else offset)
        stamp = datetime(
            int(year), int(month), int(day), int(hour), int(minute), 59 if leap else int(second),
            tzinfo=zone,
        )  # fmt: skip
    except ValueError:
        return None
    return (stamp - _EPOCH) // timedelta(seconds=1), int(leap), int((digits or "").ljust(9, "0"))


@record_rule(
    KIND,
    "human_response_before_final",
    meaning="a final decision is made while the human answer is pending, or before it (instants compared with their offsets, to the nanosecond; a leap second is an instant)",
    spec=Spec.AUTOQA,
)
def human_response_before_final(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §21: "final decisions occur after any recorded human response"
    (§20: AWAITING_HUMAN -> apply answer ... and rerun policy -> FINALIZED). A final
    decision is not made while the question awaits its answer, nor before the answer."""
    human = record["humanResolution"]
    if human is None:
        return
    asked = _instant(human["askedAt"])
    responded = None if human["respondedAt"] is None else _instant(human["respondedAt"])
    if asked is None or (human["respondedAt"] is not None and responded is None):
        yield Finding("$.humanResolution", "a time that is no calendar instant")
        return
    for i, d in enumerate(record["decisions"]):
        if d["stage"] != "final":
            continue
        decided = _instant(d["decidedAt"])
        if responded is None:
            yield Finding(f"$.decisions[{i}].stage", "final decision while the answer is pending")
        elif decided is None:
            yield Finding(f"$.decisions[{i}].decidedAt", "a time that is no calendar instant")
        elif decided < responded:
            yield Finding(f"$.decisions[{i}].decidedAt", "final decision before the human response")


@record_rule(
    KIND,
    "calibration_profile_compatible",
    meaning="the profile names another model, prompt template, contract or contract version than the document, a calibrated confidence belongs to a criterion outside the profile's slice, or a confidence is calibrated without a profile",
    spec=Spec.AUTOQA,
)
def calibration_profile_compatible(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §21: "every calibration profile is compatible with the model,
    prompt, contract, and criterion slice", as far as the document states it: the
    profile names the document's model, prompt template and contract version, and every
    calibrated confidence is of a criterion in the profile's slice (§13.4: without a
    profile, confidence is uncalibrated)."""
    profile = record["calibrationProfile"]
    assessments = record["criterionAssessments"]
    if profile is None:
        for i, a in enumerate(assessments):
            if a["calibratedConfidence"] is not None:
                yield Finding(
                    f"$.criterionAssessments[{i}].calibratedConfidence",
                    "calibrated confidence without a calibration profile",
                )
        return
    evaluator, contract = record["evaluator"], record["contractRef"]
    for field, expected in (
        ("model", evaluator["model"]),
        ("promptTemplateId", evaluator["promptTemplateId"]),
        ("contractId", contract["contractId"]),
        ("contractVersion", contract["contractVersion"]),
    ):
        if profile[field] != expected:
            yield Finding(f"$.calibrationProfile.{field}", "differs from the document's")
    sliced = set(profile["criterionIds"])
    for i, a in enumerate(assessments):
        if a["calibratedConfidence"] is not None and a["criterionId"] not in sliced:
            yield Finding(
                f"$.criterionAssessments[{i}].calibratedConfidence",
                "criterion outside the calibration profile's slice",
            )


@record_rule(
    KIND,
    "failure_status",
    meaning="a failure class is recorded without status `failed` or missing with it, or a failed evaluation makes a final decision",
    spec=Spec.AUTOQA,
)
def failure_status(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §19: "A failed pipeline MUST distinguish" its failure class, and
    "Operational failures MUST NOT be converted into criterion failures": a failure is
    recorded exactly when the status is failed, and a failed evaluation makes no final
    decision."""
    failed = record["status"] == "failed"
    if failed != (record["failure"] is not None):
        yield Finding("$.failure", "a failure class goes with status failed, and only with it")
    if failed:
        for i, d in enumerate(record["decisions"]):
            if d["stage"] == "final":
                yield Finding(f"$.decisions[{i}].stage", "a failed evaluation decided finally")


@record_rule(
    KIND,
    "applicability_first",
    meaning="the verdict is `not_applicable` without `does_not_apply`, or the other way round",
    spec=Spec.AUTOQA,
)
def applicability_first(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §8.7: "If a criterion does not apply, its verdict MUST be
    not_applicable" and §11.1 "does_not_apply -> not_applicable": the verdict is
    not_applicable exactly when the criterion does not apply."""
    for i, a in enumerate(record["criterionAssessments"]):
        if (a["applicability"] == "does_not_apply") != (a["verdict"] == "not_applicable"):
            yield Finding(
                f"$.criterionAssessments[{i}].verdict", "verdict and applicability disagree"
            )


@record_rule(
    KIND,
    "proof_invariants",
    meaning="`met` under a criterion requiring positive proof cites no confirmed positive finding; `not_met` cites no confirmed negative or omission finding and no deterministic one; `partially_met` lacks its satisfied or missing component",
    spec=Spec.AUTOQA,
)
def proof_invariants(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §8.8: "When positiveProofRequired is true and the criterion verdict
    is met, the assessment MUST reference at least one confirmed positive finding"; "When
    the verdict is not_met, the assessment MUST reference at least one confirmed negative
    or omission finding unless failure is produced by a deterministic validator";
    "partially_met MUST identify both the satisfied component and the missing or
    defective component". positiveProofRequired is the contract's (table)."""
    findings = {f["findingId"]: f for f in record["findings"]}
    contract = _contract(record, ctx)
    if isinstance(contract, Finding) and any(
        a["verdict"] == "met" for a in record["criterionAssessments"]
    ):
        yield contract  # the met verdicts cannot be checked; the others still are
    for i, a in enumerate(record["criterionAssessments"]):
        path = f"$.criterionAssessments[{i}]"
        cited = [findings[f] for f in a["findingIds"] if f in findings]
        confirmed = [f for f in cited if f["status"] == "confirmed"]
        verdict = a["verdict"]
        if verdict == "met":
            if not isinstance(contract, Contract) or not contract.positive_proof.get(
                a["criterionId"], False
            ):
                continue  # unknown above, or contract_resolves / criterion_in_contract's
            if not any(f["type"] == "positive" for f in confirmed):
                yield Finding(f"{path}.findingIds", "met without a confirmed positive finding")
        elif verdict == "not_met":
            if not any(f["type"] in ("negative", "omission") for f in confirmed) and not any(
                f["deterministic"] for f in cited
            ):
                yield Finding(
                    f"{path}.findingIds", "not_met without a confirmed negative or omission finding"
                )
        elif verdict == "partially_met" and (
            not (a["satisfiedComponent"] or "").strip() or not (a["missingComponent"] or "").strip()
        ):
            yield Finding(path, "partially_met without its satisfied and missing components")


# -- checks against the referenced contract (the contracts table) ----------------------


@record_rule(
    KIND,
    "contract_resolves",
    meaning="the contracts table holds no such contract id and version, or another hash for it",
    spec=Spec.AUTOQA,
)
def contract_resolves(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """AutoQA contract §7: "A production evaluation MUST reference an approved contract by
    identifier, semantic version, and content hash" (§25: "input and contract references
    resolve"): the contracts table holds that id and version with that hash."""
    contract = _contract(record, ctx)
    if isinstance(contract, Finding):
        yield contract
    elif contract is None:
        yield Finding("$.contractRef", "no such contract id and version in the contracts table")
    elif contract.sha256 != record["contractRef"]["contractSha256"]:
        yield Finding("$.contractRef.contractSha256", "not the hash of that contract version")


ContractCheck = Callable[[dict[str, Any], Contract], Iterable[Finding]]


def contract_rule(
    name: str,
    applies: Callable[[dict[str, Any]], bool] = lambda record: True,
    *,
    meaning: str,
) -> Callable[[ContractCheck], ContractCheck]:
    """Register ``check`` as rule ``name`` of the kind, called with the referenced
    contract for documents it ``applies`` to. Without the contracts table the rule is
    unknown (quarantine); a contract the table lacks is ``contract_resolves``'s finding."""

    def register(check: ContractCheck) -> ContractCheck:
        @functools.wraps(check)
        def run(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
            if not applies(record):
                return
            contract = _contract(record, ctx)
            if isinstance(contract, Finding):
                yield contract
            elif contract is not None:
                yield from check(record, contract)

        record_rule(KIND, name, meaning=meaning, spec=Spec.AUTOQA)(run)
        NEEDS_CONTRACTS.append(f"semantic.{KIND}.{name}")
        return check

    return register


@contract_rule(
    "contract_approved",
    meaning="a `final` evaluation references a contract whose status is not `approved`",
    applies=lambda record: record["status"] == "final",
)
def contract_approved(record: dict[str, Any], contract: Contract) -> Iterator[Finding]:
    """AutoQA contract §7: "A production evaluation MUST reference an approved contract"
    (§8.1 status: draft, approved, deprecated, or retired): a final evaluation's contract
    is approved."""
    if contract.status != "approved":
        yield Finding("$.contractRef", "a final evaluation under a contract that is not approved")


@contract_rule(
    "criterion_in_contract",
    meaning="an assessment, finding, expected element, human question or calibration slice names a criterion the contract lacks",
)
def criterion_in_contract(record: dict[str, Any], contract: Contract) -> Iterator[Finding]:
    """AutoQA contract §21: "every criterionId in assessments exists in the referenced
    contract"; so do those findings, expected elements, the human question and the
    calibration slice attribute to."""
    known = contract.positive_proof
    named = [
        (f"$.criterionAssessments[{i}].criterionId", a["criterionId"])
        for i, a in enumerate(record["criterionAssessments"])
    ]
    for i, f in enumerate(record["findings"]):
        named += [
            (f"$.findings[{i}].criterionIds[{j}]", c) for j, c in enumerate(f["criterionIds"])
        ]
    named += [
        (f"$.expectedElements[{i}].criterionId", e["criterionId"])
        for i, e in enumerate(record["expectedElements"])
    ]
    if record["humanResolution"] is not None:
        named.append(("$.humanResolution.criterionId", record["humanResolution"]["criterionId"]))
    if record["calibrationProfile"] is not None:
        named += [
            (f"$.calibrationProfile.criterionIds[{j}]", c)
            for j, c in enumerate(record["calibrationProfile"]["criterionIds"])
        ]
    for path, criterion in named:
        if criterion not in known:
            yield Finding(path, "no such criterion in the referenced contract")


@contract_rule(
    "evidence_permitted",
    meaning="a finding uses evidence of a class the contract does not permit for one of its criteria",
    applies=lambda record: bool(record["evidence"]),
)
def evidence_permitted(record: dict[str, Any], contract: Contract) -> Iterator[Finding]:
    """AutoQA contract §21: "every evidence identifier exists and is permitted for the
    relevant criterion" (§9.2: "The evaluator MUST reject or ignore evidence marked
    disallowed for the relevant criterion"): evidence a finding uses is of a class the
    contract permits for each criterion the finding is attributed to."""
    classes = {e["evidenceId"]: e["evidenceClass"] for e in record["evidence"]}
    for i, f in enumerate(record["findings"]):
        for j, eid in enumerate(f["evidenceIds"]):
            evidence_class = classes.get(eid)
            if evidence_class is None:
                continue  # evidence_refs_exist
            for criterion in f["criterionIds"]:
                allowed = contract.permitted.get(criterion)
                if allowed is not None and evidence_class not in allowed:
                    yield Finding(
                        f"$.findings[{i}].evidenceIds[{j}]",
                        "evidence class not permitted for the finding's criterion",
                    )
                    break


def _decides(record: dict[str, Any]) -> bool:
    return bool(record["decisions"])


@contract_rule(
    "decision_target_declared",
    meaning="a decision's target is not in the contract's `decisionTargets`",
    applies=_decides,
)
def decision_target_declared(record: dict[str, Any], contract: Contract) -> Iterator[Finding]:
    """AutoQA contract §21: "every decision target is declared in the contract" (§5.2:
    "The required targets are declared in decisionTargets")."""
    for i, d in enumerate(record["decisions"]):
        if d["target"] not in contract.targets:
            yield Finding(f"$.decisions[{i}].target", "target not declared by the contract")


@contract_rule(
    "triggered_rule_declared",
    meaning="a matched trace step names no rule of the contract's policy for that decision's target",
    applies=_decides,
)
def triggered_rule_declared(record: dict[str, Any], contract: Contract) -> Iterator[Finding]:
    """AutoQA contract §21: "every triggered rule exists and targets the same decision
    target": each matched rule of a decision's policy trace is a rule of the contract's
    policy for that decision's target."""
    for i, d in enumerate(record["decisions"]):
        for j, step in enumerate(d["trace"]):
            if step["matched"] and contract.rules.get(step["ruleId"]) != d["target"]:
                yield Finding(
                    f"$.decisions[{i}].trace[{j}].ruleId",
                    "no rule of the contract's policy for this target",
                )


def _most_severe(actions: Iterable[str]) -> str:
    """The composite of target actions: escalate when any target escalated (nothing was
    decided for it), else the most severe by §8.12's order."""
    found = list(actions)
    if "escalate" in found:
        return "escalate"
    return max(found, key=_ACTION_ORDER.index)


@contract_rule(
    "composite_policy",
    meaning="the `composite_case` action is not the composite policy's: `most_severe` is `escalate` when another target of that stage escalated, else the most severe of their actions (`accept` < `accept_with_note` < `rework` < `reject`)",
    applies=lambda record: any(d["target"] == "composite_case" for d in record["decisions"]),
)
def composite_policy(record: dict[str, Any], contract: Contract) -> Iterator[Finding]:
    """AutoQA contract §21: "composite-case decisions are consistent with the project's
    composite policy" (§5.2: "Composite-case decision: rework" when the annotation needs
    rework). rowgate decides ``most_severe``: the composite action is the most severe of
    the other targets' actions of the same stage (escalate if any escalated); a contract
    naming no composite policy leaves a composite decision unknown."""
    if contract.composite_policy is None:
        yield unknown("the contract declares no composite policy", "$.decisions")
        return
    for at, d in enumerate(record["decisions"]):
        if d["target"] != "composite_case":
            continue
        others = [
            o["action"]
            for o in record["decisions"]
            if o["stage"] == d["stage"] and o["target"] != "composite_case"
        ]
        if others and d["action"] != _most_severe(others):
            yield Finding(f"$.decisions[{at}].action", "not the composite policy's action")
