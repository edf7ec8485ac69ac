"""ARI replication rubric envelopes: both generations, rubric_sha256, schema agreement."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Callable
from typing import Any

import jsonschema
import orjson
import pytest

from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import Disposition
from pipeline.gate.gate import Gate
from pipeline.kinds.ari import rubric_sha256
from pipeline.records.schemas import SchemaRegistry
from pipeline.testing.synthetic import ari_rubric_3, ari_rubric_v2
from tests.conftest import SHARED

REFERENCE_FILE = "reference/ari/replication_rubric.v2.schema.json"
REFERENCE = SHARED / REFERENCE_FILE
GATE = Gate(CampaignConfig())


def test_both_generations_route_by_their_version_fields() -> None:
    seed = ari_rubric_3(random.Random(1), 1)
    v2 = ari_rubric_v2(random.Random(1), 1)
    assert GATE.gate_line(orjson.dumps(seed)).kind == "ari-replication-rubric-3"
    assert GATE.gate_line(orjson.dumps(v2)).kind == "ari-replication-rubric-v2"
    assert GATE.gate_line(
        orjson.dumps({**v2, "schema_version": "ari.replication-rubric/v9"})
    ).reasons[0].code == ("schema.unsupported_version")


def test_rubric_sha256_is_python_json_not_rfc8785() -> None:
    """The upstream form keeps 0.0 as ``0.0`` and non-ASCII text raw; RFC 8785 would write 0."""
    envelope = {"b": 0.0, "a": "é", "rubric_sha256": "x"}
    expected = hashlib.sha256('{"a":"é","b":0.0}'.encode()).hexdigest()
    assert rubric_sha256(envelope, ("rubric_sha256",)) == expected


def test_seed_generation_digest_leaves_audit_out() -> None:
    envelope = ari_rubric_3(random.Random(2), 2)
    audited = {
        **envelope,
        "audit": {"auditor_model": "m", "audited_at": "2026-05-13T10:00:00Z", "flags_count": 1},
    }
    outcome = GATE.gate_line(orjson.dumps(audited))
    assert outcome.disposition is Disposition.ACCEPTED, outcome.reasons


def test_v2_digest_covers_everything_but_itself() -> None:
    envelope = ari_rubric_v2(random.Random(3), 3)
    envelope["reproduce_contract"]["max_runtime_sec"] += 1
    codes = [r.code for r in GATE.gate_line(orjson.dumps(envelope)).reasons]
    assert codes == ["semantic.ari-replication-rubric-v2.rubric_sha256"]


def _leaf(envelope: dict[str, Any]) -> dict[str, Any]:
    node = envelope["rubric"]
    while node.get("sub_tasks"):
        node = node["sub_tasks"][0]
    return node


Mutation = Callable[[dict[str, Any]], object]
V2_FIXTURES: dict[str, Mutation] = {
    "valid": lambda e: None,
    "missing repair_ledger": lambda e: e.pop("repair_ledger"),
    "wrong schema_version": lambda e: e.update(schema_version="ari.replication-rubric/v3"),
    "extra property": lambda e: e.update(audit={"flags_count": 1}),
    "leaf without evidence_span": lambda e: _leaf(e).pop("evidence_span"),
    "leaf without verification": lambda e: _leaf(e).pop("verification"),
    "open category": lambda e: _leaf(e).update(task_category="Writing"),
    "null category on a leaf": lambda e: _leaf(e).update(task_category=None),
    "external prerequisite rationale": lambda e: _leaf(e).update(
        rationale_from_paper={
            "external_prerequisite": {"description": "a licensed dataset", "source": "vendor"}
        }
    ),
    "both rationale forms": lambda e: _leaf(e)["rationale_from_paper"].update(
        external_prerequisite={"description": "x" * 10, "source": "abc"}
    ),
    "external evidence span": lambda e: _leaf(e).update(
        evidence_span={
            "kind": "external-prerequisite",
            "description": "a licensed dataset",
            "source": "vendor",
        }
    ),
    "span quote too short": lambda e: _leaf(e)["evidence_span"].update(quote="short"),
    "log-pattern on another file": lambda e: _leaf(e).update(
        verification={"kind": "log-pattern", "relative_path": "x.log", "pattern": "ok"}
    ),
    "metric verification": lambda e: _leaf(e).update(
        verification={
            "kind": "metric",
            "relative_path": "results/m.csv",
            "metric": "f1",
            "unit": "ratio",
        }
    ),
    "artifact path escapes": lambda e: _leaf(e).update(
        verification={"kind": "artifact", "relative_path": "../secret"}
    ),
    "absolute artifact path": lambda e: _leaf(e).update(
        verification={"kind": "artifact", "relative_path": "/etc/x"}
    ),
    "negative weight": lambda e: e["rubric"].update(weight=-1),
    "fractional weight": lambda e: e["rubric"].update(weight=1.5),
    "short requirements": lambda e: e["rubric"].update(requirements="too short"),
    "completed call without response": lambda e: e["generator"]["calls"][0].pop("raw_response"),
    "failed call without response": lambda e: (
        e["generator"]["calls"][0].pop("raw_response"),
        e["generator"]["calls"][0].update(status="failed"),
    ),
    "too many subtrees": lambda e: e["generator"].update(subtree_concurrency=17),
    "memory per node and per cpu": lambda e: e["reproduce_contract"].update(
        execution_profile={"memory_gb_per_node": 4, "memory_gb_per_cpu": 2}
    ),
    "memory per node only": lambda e: e["reproduce_contract"].update(
        execution_profile={"memory_gb_per_node": 4, "memory_gb_per_cpu": 0}
    ),
    "bad runtime": lambda e: e["reproduce_contract"].update(max_runtime_sec=30),
    "unknown repair action": lambda e: e["repair_ledger"]["actions"].append(
        {
            "sequence": 0,
            "action": "rewrite",
            "target": "x",
            "before_sha256": "a" * 64,
            "after_sha256": "b" * 64,
            "reason": "r",
        }
    ),
    "known repair action": lambda e: e["repair_ledger"]["actions"].append(
        {
            "sequence": 0,
            "action": "json-sanitize",
            "target": "x",
            "before_sha256": "a" * 64,
            "after_sha256": "b" * 64,
            "reason": "r",
        }
    ),
    "uppercase digest": lambda e: e.update(paper_sha256="A" * 64),
    "nodelist pattern": lambda e: e["reproduce_contract"].update(
        execution_profile={"requested_nodelist": "node[01-04]"}
    ),
    "bad nodelist": lambda e: e["reproduce_contract"].update(
        execution_profile={"requested_nodelist": "-bad"}
    ),
}


@pytest.mark.needs_shared(REFERENCE_FILE)
@pytest.mark.parametrize("name", sorted(V2_FIXTURES))
def test_v2_schema_agrees_with_the_upstream_reference(name: str) -> None:
    """rowgate's v2 schema under fastjsonschema and the upstream file under the reference
    validator (jsonschema, Draft 2020-12) accept and reject the same fixtures."""
    reference = json.loads(REFERENCE.read_text("utf-8"))
    envelope = copy.deepcopy(ari_rubric_v2(random.Random(5), 5))
    V2_FIXTURES[name](envelope)
    ours = not SchemaRegistry().get("ari-replication-rubric-v2").errors(envelope)
    theirs = jsonschema.Draft202012Validator(reference).is_valid(envelope)
    assert ours == theirs
    assert (name == "valid") <= ours


@pytest.mark.needs_shared(REFERENCE_FILE)
def test_fixtures_cover_both_verdicts() -> None:
    reference = json.loads(REFERENCE.read_text("utf-8"))
    verdicts = set()
    for mutate in V2_FIXTURES.values():
        envelope = copy.deepcopy(ari_rubric_v2(random.Random(5), 5))
        mutate(envelope)
        verdicts.add(jsonschema.Draft202012Validator(reference).is_valid(envelope))
    assert verdicts == {True, False}
