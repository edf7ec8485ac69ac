"""Synthetic exports: valid records of every kind, and lines with every defect class.

Deterministic for a seed. Used by ``data/generate.py`` (the bundled samples), by the
benchmarks (large pairwise exports) and by tests. No real people or data are involved.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson

__all__ = [
    "AUTOQA_CONTRACTS",
    "DEFECTS",
    "GENERATORS",
    "autoqa_human",
    "decide_rows_with_conflicts",
    "defect_line",
    "export_lines",
    "json_dumps_layout",
    "make_record",
    "plant_pii",
    "planted_secrets",
]

_WORDS: Final = [
    "value",
    "list",
    "order",
    "python",
    "function",
    "return",
    "result",
    "index",
    "cache",
    "key",
    "batch",
    "stream",
    "parse",
    "schema",
    "token",
    "model",
    "review",
    "patch",
    "test",
    "error",
    "input",
    "output",
    "merge",
    "sort",
    "query",
    "document",
    "answer",
    "evidence",
    "claim",
    "source",
    "retrieve",
    "filter",
    "reduce",
    "window",
    "buffer",
    "field",
    "naïve",
    "café",
    "résumé",
    "données",
    "über",
    "straße",
    "数据",
    "模型",
    "検証",
    "—",
    "“quoted”",
    "emoji🙂",
    "coördinate",
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _code(rng: random.Random, lines: int) -> str:
    body = [
        f"    {rng.choice(['x', 'y', 'acc'])} = {rng.choice(['x', 'y'])} + {rng.randint(0, 9)}"
        for _ in range(lines)
    ]
    name = rng.choice(["unique_values", "merge_rows", "score", "normalise"])
    return f"def {name}(values):\n" + "\n".join(body) + "\n    return list(dict.fromkeys(values))"


def _rationale(rng: random.Random, preference: str, size: int) -> str:
    if preference in ("A", "B"):
        return f"Response {preference} is better because it keeps the order and " + _text(
            rng, 12 * size
        )
    return "Neither response handles the ordering requirement; both " + _text(rng, 12 * size)


def pairwise(rng: random.Random, i: int, size: int = 1) -> dict[str, Any]:
    """A pairwise-v2 annotation; ``size`` scales the text (1 ≈ 1 KB, 3 ≈ 3 KB)."""
    preference = rng.choices(["A", "B", "tie", "neither"], weights=[45, 45, 5, 5])[0]
    messages = [{"role": "user", "content": _text(rng, 20 * size)}]
    if rng.random() < 0.2:
        messages = [
            {"role": "system", "content": "You are a careful reviewer."},
            {"role": "user", "content": _text(rng, 10 * size)},
            {"role": "assistant", "content": _text(rng, 10 * size)},
            {"role": "user", "content": _text(rng, 8 * size)},
        ]
    return {
        "task_id": f"task-{i:07d}",
        "messages": messages,
        "response_a": _code(rng, 4 * size) + "\n# " + _text(rng, 25 * size),
        "response_b": _code(rng, 4 * size) + "\n# " + _text(rng, 25 * size),
        "preference": preference,
        "rationale": _rationale(rng, preference, size),
        "golden_patch": _code(rng, 3) if preference == "neither" or rng.random() < 0.1 else None,
        "schema_version": "pairwise-v2",
        "rubric_version": "code-review-v1",
        "ratings": {
            k: rng.randint(1, 5)
            for k in ("factuality", "reasoning", "instruction_adherence", "style")
        },
    }


def agent_trace(rng: random.Random, i: int, size: int = 1) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for n in range(rng.randint(1, 4)):
        ok = rng.random() > 0.15
        ids = list(
            dict.fromkeys(
                f"doc-{rng.randint(1, 50):03d}" for _ in range(rng.randint(0, 3) if ok else 0)
            )
        )
        steps.append(
            {
                "call_id": f"call-{n + 1}",
                "tool": "retrieve_documents",
                "arguments": {"query": _text(rng, 5), "top_k": rng.randint(1, 10)},
                "result": {"document_ids": ids, "success": ok},
                "latency_ms": rng.randint(5, 3000),
            }
        )
    return {
        "task_id": f"trace-{i:06d}",
        "prompt": _text(rng, 15 * size),
        "steps": steps,
        "final_answer": _text(rng, 30 * size),
    }


DOCUMENTS: Final = {
    f"doc-{n:03d}": f"Section {n}. " + " ".join(random.Random(n).choice(_WORDS) for _ in range(60))
    for n in range(1, 51)
}


def grounded_qa(rng: random.Random, i: int, size: int = 1) -> dict[str, Any]:
    abstain = rng.random() < 0.1
    citations = []
    for _ in range(0 if abstain else rng.randint(1, 3)):
        doc_id = f"doc-{rng.randint(1, 50):03d}"
        text = DOCUMENTS[doc_id]
        start = rng.randint(0, len(text) - 20)
        end = start + rng.randint(5, 19)
        citations.append(
            {
                "document_id": doc_id,
                "document_sha256": hashlib.sha256(text.encode()).hexdigest(),
                "start": start,
                "end": end,
                "quote": text[start:end],
            }
        )
    return {
        "task_id": f"qa-{i:06d}",
        "domain": rng.choice(["general_rag", "clinical_qa"]),
        "question": _text(rng, 12 * size) + "?",
        "answer": "The context does not say." if abstain else _text(rng, 25 * size),
        "citations": citations,
        "abstain": abstain,
    }


def math_reasoning(rng: random.Random, i: int, size: int = 1) -> dict[str, Any]:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    return {
        "task_id": f"math-{i:06d}",
        "problem": f"Compute {a} * {b} and explain each step.",
        "assumptions": list(dict.fromkeys(["integers are exact", "base ten"][: rng.randint(0, 2)])),
        "derivation": [f"{a} * {b} = {a} * {b // 2 * 2} + {a} * {b % 2}", f"= {a * b}"],
        "final_answer": str(a * b),
        "reasoning_score": rng.randint(1, 5),
    }


def pw_decide_row(rng: random.Random, i: int, size: int = 1) -> dict[str, Any]:
    loadable = sorted(
        rng.sample(["read_file", "grep", "edit", "run_tests", "web_search", "delegate"], 4)
    )
    guides = ["style", "testing", "security"]
    partial = rng.random() < 0.1
    # every fourth row is a coordinator; the rows after it are its worker legs or more
    # coordinators, so a worker's root session always names a coordinator row
    coordinator = i % 4 == 0 or rng.random() < 0.5
    session = f"s-{i:05d}"
    root = session if coordinator else f"s-{(i // 4) * 4:05d}"
    tools = [] if partial else sorted(rng.sample(loadable, rng.randint(0, 2)))
    state = rng.choice(["answered", "abstained"])
    kinds = (
        ["answer_only", "inspect", "change", "run", "delegate"]
        if not tools
        else ["inspect", "change", "run", "delegate"]
    )
    return {
        "schema": "pw-decide-row/1",
        "receipt": 1_700_000_000_000 + i,
        "session": session,
        "root_session": root,
        "opening_message_id": f"m-{i:05d}",
        "host": "coordinator" if coordinator else "worker",
        "surface": "cli" if coordinator else "worker-profile",
        "catalog_revision": "r42",
        "project": "demo",
        "model": "example-model-1",
        "partial": partial,
        "lang": rng.choice(["en", "other"]),
        "engine": {
            "state": state,
            "reason": "confident" if state == "answered" else "low margin",
            "preloaded": tools[:1] if state == "answered" else [],
            "omitted": [],
        },
        "offered": {"floor": ["read_file"], "loadable": loadable, "guides": guides},
        "state": {"host": {"cwd": "/repo", "os": "linux"}, "user": {"text": _text(rng, 10 * size)}},
        "labels": {
            "tools": tools,
            "requests": [
                {
                    "need": _text(rng, 4),
                    "exact": [],
                    "after": [],
                    "scores": {t: rng.randint(0, 4) for t in tools},
                }
            ],
            "requested_names": [],
            "requested_groups": [],
            "skills": [],
            "kind": None if partial else rng.choice(kinds),
            "guides": {g: rng.choice([True, False, None]) for g in guides},
        },
        "judge": {"model": "judge-model-1", "prompt": "relevance-v2"},
        "meta": {"task": f"t-{i % 7}", "group": f"g-{i % 5}"},
    }


def decide_rows_with_conflicts(count: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """pw-decide-row rows with the conflicts between rows that the cross-record rules find:
    sessions naming two models, workers whose root session no coordinator row has (or
    only one the gate or a rule rejects), and coordinator rows the gate rejects (their
    root is not their session) naming yet another model, which must not count. Every row
    has its own receipt."""
    rng = random.Random(seed)
    coordinators = max(count // 8, 1)
    rows = []
    for i in range(count):
        record = make_record("pw-decide-row-1", rng, i)
        session = f"c-{rng.randrange(coordinators):04d}"
        model = "model-b" if rng.random() < 0.04 else "model-a"
        draw = rng.random()
        if draw < 0.3:
            record.update(host="coordinator", surface="cli", session=session, root_session=session)
        elif draw < 0.35:  # rejected by the gate
            record.update(host="coordinator", session=session, root_session="c-none")
            model = "model-c"
        else:  # a fifth of them rooted past the coordinators' sessions
            root = f"c-{rng.randrange(coordinators + coordinators // 4 + 1):04d}"
            record.update(
                host="worker",
                surface="worker-profile",
                session=f"w-{rng.randrange(max(count // 4, 1)):04d}",
                root_session=root,
            )
        record["model"] = model
        rows.append(record)
    return rows


_CATEGORIES: Final = (
    ("Code Development", "Method Implementation"),
    ("Code Execution", "Experimental Setup"),
    ("Result Analysis", "Evaluation, Metrics & Benchmarking"),
    ("Code Development", "Data Processing & Preparation"),
)
PAPER: Final = (
    "We train the model with a cosine schedule for 30 epochs. Table 2 reports accuracy on the "
    "held-out split. The ablation removes the auxiliary loss and measures the drop in F1."
)


def _uuid4(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _task_tree(rng: random.Random, v2: bool, depth: int = 0) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": _uuid4(rng),
        "requirements": "The submission " + _text(rng, 8),
        "weight": rng.randint(1, 3),
    }
    if depth < 2 and (depth == 0 or rng.random() < 0.5):
        node["sub_tasks"] = [_task_tree(rng, v2, depth + 1) for _ in range(rng.randint(2, 3))]
        return node
    category, fine = rng.choice(_CATEGORIES)
    start = rng.randrange(0, len(PAPER) - 40)
    quote = PAPER[start : start + 30]
    node.update(task_category=category, finegrained_task_category=fine, sub_tasks=[])
    node["rationale_from_paper"] = {"section": f"§{rng.randint(1, 5)}", "quote": quote}
    if v2:
        node["evidence_span"] = {
            "kind": "paper-span",
            "section": node["rationale_from_paper"]["section"],
            "quote": quote,
            "start_char": start,
            "end_char": start + 30,
            "paper_sha256": hashlib.sha256(PAPER.encode()).hexdigest(),
        }
        node["verification"] = {"kind": "artifact", "relative_path": "results/metrics.csv"}
    elif rng.random() < 0.1:
        node["flags"] = [rng.choice(["vague_qualifier", "unverifiable"])]
    return node


def _envelope(record: dict[str, Any], excluded: tuple[str, ...]) -> dict[str, Any]:
    body = {k: v for k, v in record.items() if k not in excluded}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    record["rubric_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return record


def ari_rubric_3(rng: random.Random, i: int, size: int = 1) -> dict[str, Any]:
    """An envelope of the generation seed 001 describes, with a correct rubric_sha256."""
    record: dict[str, Any] = {
        "version": "3",
        "paper_sha256": hashlib.sha256(PAPER.encode()).hexdigest(),
        "rubric_sha256": "",
        "generator": {
            "model": "example/generator-1",
            "prompt_sha256": hashlib.sha256(f"prompt-{i}".encode()).hexdigest(),
            "generated_at": "2026-05-13T09:00:00Z",
            "temperature": 0.0,
            "seed": i,
        },
        "reproduce_contract": {
            "script_path": "reproduce.sh",
            "max_runtime_sec": 21600,
            "expected_artifacts": ["results.csv"],
        },
        "rubric": _task_tree(rng, v2=False),
    }
    if rng.random() < 0.5:
        record["audit"] = {
            "auditor_model": "example/auditor-1",
            "audited_at": "2026-05-13T10:00:00Z",
            "flags_count": 0,
        }
    return _envelope(record, ("rubric_sha256", "audit"))


def ari_rubric_v2(rng: random.Random, i: int, size: int = 1) -> dict[str, Any]:
    """An upstream ``ari.replication-rubric/v2`` envelope with a correct rubric_sha256."""
    digest = hashlib.sha256(f"call-{i}".encode()).hexdigest()
    artifact = {
        "relative_path": f"calls/{i}.json",
        "sha256": digest,
        "size_bytes": 120,
        "media_type": "application/json",
    }
    record: dict[str, Any] = {
        "schema_version": "ari.replication-rubric/v2",
        "version": "3",
        "paper_sha256": hashlib.sha256(PAPER.encode()).hexdigest(),
        "rubric_sha256": "",
        "generator": {
            "model": "example/generator-2",
            "provider": "example",
            "prompt_sha256": digest,
            "generated_at": "2026-05-13T09:00:00Z",
            "temperature": 0.0,
            "seed": i,
            "strategy": "hierarchical-v2",
            "quality_profile": "calibrated",
            "max_model_calls": 8,
            "subtree_concurrency": 2,
            "calls": [
                {
                    "label": "skeleton",
                    "status": "completed",
                    "model": "example/generator-2",
                    "provider": "example",
                    "prompt": artifact,
                    "raw_response": artifact,
                    "call_sha256": digest,
                }
            ],
            "partial_failures": [],
        },
        "repair_ledger": {"actions": [], "dropped_artifacts": []},
        "reproduce_contract": {"script_path": "reproduce.sh", "max_runtime_sec": 3600},
        "rubric": _task_tree(rng, v2=True),
    }
    return _envelope(record, ("rubric_sha256",))


# -- AutoQA evaluation documents (the AutoQA evaluation contract, autoqa-eval-1) ---------


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _autoqa_contract(version: str, status: str) -> dict[str, Any]:
    return {
        "contractId": "code-review-qa",
        "contractVersion": version,
        "contractSha256": _sha(f"code-review-qa@{version}"),
        "status": status,
        "decisionTargets": ["attempt", "annotation", "composite_case"],
        "criteria": [
            {
                "criterionId": "correctness",
                "positiveProofRequired": True,
                "permittedEvidenceClasses": ["specification", "test_log"],
                "dependsOn": [],
            },
            {
                "criterionId": "grounding",
                "positiveProofRequired": True,
                "permittedEvidenceClasses": ["specification"],
                "dependsOn": [],
            },
            {
                "criterionId": "warrant",
                "positiveProofRequired": False,
                "permittedEvidenceClasses": None,
                "dependsOn": ["grounding"],
            },
            {
                "criterionId": "completeness",
                "positiveProofRequired": True,
                "permittedEvidenceClasses": None,
                "dependsOn": [],
            },
            {
                "criterionId": "label_support",
                "positiveProofRequired": False,
                "permittedEvidenceClasses": None,
                "dependsOn": ["correctness"],
            },
        ],
        "rules": [
            {"ruleId": "attempt-uncertain-escalate", "target": "attempt"},
            {"ruleId": "attempt-partial-rework", "target": "attempt"},
            {"ruleId": "attempt-all-met-accept", "target": "attempt"},
            {"ruleId": "annotation-unsupported-rework", "target": "annotation"},
            {"ruleId": "annotation-supported-accept", "target": "annotation"},
            {"ruleId": "composite-most-severe", "target": "composite_case"},
        ],
        "precedence": [{"higher": "grounding", "lower": "warrant"}],
        "compositePolicy": "most_severe",
    }


#: The contracts table of the AutoQA samples: an approved version and a draft of the next.
AUTOQA_CONTRACTS: Final = (
    _autoqa_contract("1.2.0", "approved"),
    _autoqa_contract("1.3.0-draft", "draft"),
)
AUTOQA_VERDICTS: Final = (
    "met",
    "partially_met",
    "not_met",
    "not_applicable",
    "unknown",
    "ambiguous",
)
_ATTEMPT: Final = (
    "def unique(values):\n    return list(dict.fromkeys(values))\n"
    "# keeps the first occurrence order of the input. "
)
_SPEC: Final = "The function must return the unique values in first-occurrence order. "
_LOG: Final = "test_unique_order PASSED in 0.01s; test_empty PASSED. "


def _span(artifact: str, content: str, quote: str, offsets: bool = True) -> dict[str, Any]:
    start = content.index(quote)
    return {
        "artifactId": artifact,
        "start": start if offsets else None,
        "end": start + len(quote) if offsets else None,
        "quote": quote,
    }


def _finding(fid: str, kind: str, criteria: list[str], **fields: Any) -> dict[str, Any]:
    finding = {
        "findingId": fid,
        "type": kind,
        "criterionIds": criteria,
        "claimIds": [],
        "elementIds": [],
        "evidenceIds": [],
        "targetSpans": [],
        "materiality": "material",
        "severity": "none" if kind == "positive" else "minor",
        "confidence": 0.9,
        "producer": "positive-prover" if kind == "positive" else "negative-challenger",
        "deterministic": False,
        "status": "confirmed",
    }
    finding.update(fields)
    return finding


def _assessment(
    rng: random.Random, criterion: str, verdict: str, findings: list[str], **fields: Any
) -> dict[str, Any]:
    confidence = round(rng.uniform(0.5, 0.99), 3)
    reference: str | None = verdict
    if rng.random() > confidence:  # the evaluator is wrong about as often as it is unsure
        reference = rng.choice([v for v in AUTOQA_VERDICTS if v != verdict])
    if rng.random() < 0.2:
        reference = None  # no benchmark reference for this criterion
    assessment = {
        "criterionId": criterion,
        "applicability": "does_not_apply" if verdict == "not_applicable" else "applies",
        "verdict": verdict,
        "findingIds": findings,
        "satisfiedComponent": None,
        "missingComponent": None,
        "severity": "none" if verdict in ("met", "not_applicable") else "minor",
        "rawConfidence": round(min(1.0, confidence + 0.05), 3),
        "calibratedConfidence": confidence,
        "confidenceBand": "high" if confidence >= 0.9 else "medium" if confidence >= 0.7 else "low",
        "grounding": "grounded",
        "truth": "true",
        "warrant": "warranted",
        "relevance": "relevant",
        "dependsOn": [],
        "referenceVerdict": reference,
    }
    assessment.update(fields)
    return assessment


def _trace(rules: list[str], chosen: str) -> list[dict[str, Any]]:
    steps = []
    for n, rule in enumerate(rules):
        steps.append(
            {"ruleId": rule, "priority": 10 * (n + 1), "matched": rule == chosen, "terminal": True}
        )
        if rule == chosen:
            break
    return steps


def autoqa_human(responded_at: str | None) -> dict[str, Any]:
    """The one bounded human question of a sample evaluation (asked at 10:00Z; its
    decisions are made at 11:00Z), answered at ``responded_at`` (None: pending)."""
    return {
        "criterionId": "warrant",
        "question": "Does the attempt claim more than the test log shows?",
        "options": ["yes", "no", "the instructions are ambiguous"],
        "decisionChanging": True,
        "askedAt": "2026-05-13T10:00:00Z",
        "respondedAt": responded_at,
        "answer": None if responded_at is None else "yes",
    }


def autoqa_eval(rng: random.Random, i: int, size: int = 1) -> dict[str, Any]:
    """An AutoQA evaluation output under the sample contract ``code-review-qa`` 1.2.0,
    consistent in every §21 respect; verdicts, confidences and reference verdicts vary."""
    contract = AUTOQA_CONTRACTS[0]
    attempt = _ATTEMPT + _text(rng, 12 * size)
    spec, log = _SPEC + _text(rng, 10 * size), _LOG + _text(rng, 6 * size)
    model, prompt = "example/evaluator-1", "autoqa-code-review"
    warrant = rng.choice(["met", "partially_met", "not_met", "unknown", "ambiguous"])
    label = rng.choice(["met", "not_met"])
    applies = rng.random() < 0.8
    findings = [
        _finding(
            "f-1",
            "positive",
            ["correctness", "grounding"],
            claimIds=["claim-1"],
            evidenceIds=["ev-spec"],
            targetSpans=[_span("attempt", attempt, "keeps the first occurrence order")],
        ),
        _finding("f-2", "positive", ["completeness"], elementIds=["el-1"]),
        _finding(
            "f-3",
            "positive",
            ["correctness"],
            claimIds=["claim-2"],
            evidenceIds=["ev-log"],
            producer="test-runner",
            deterministic=True,
        ),
        _finding("f-4", "negative", ["warrant"], claimIds=["claim-2"]),
        _finding("f-5", "positive" if label == "met" else "negative", ["label_support"]),
    ]
    partial = {"satisfiedComponent": "order kept", "missingComponent": "no evidence for speed"}
    assessments = [
        _assessment(rng, "correctness", "met", ["f-1", "f-3"]),
        _assessment(rng, "grounding", "met", ["f-1"]),
        _assessment(
            rng,
            "warrant",
            warrant,
            ["f-4"],
            dependsOn=["grounding"],
            warrant="overstated" if warrant != "met" else "warranted",
            **(partial if warrant == "partially_met" else {}),
        ),
        _assessment(
            rng, "completeness", "met" if applies else "not_applicable", ["f-2"] if applies else []
        ),
        _assessment(rng, "label_support", label, ["f-5"], dependsOn=["correctness"]),
    ]
    if warrant in ("unknown", "ambiguous"):
        attempt_rule, attempt_action = "attempt-uncertain-escalate", "escalate"
    elif warrant in ("partially_met", "not_met"):
        attempt_rule, attempt_action = "attempt-partial-rework", "rework"
    else:
        attempt_rule, attempt_action = "attempt-all-met-accept", "accept"
    annotation_rule = (
        "annotation-supported-accept" if label == "met" else "annotation-unsupported-rework"
    )
    annotation_action = "accept" if label == "met" else "rework"
    composite_action = (
        "escalate"
        if "escalate" in (attempt_action, annotation_action)
        else max(attempt_action, annotation_action, key=["accept", "rework"].index)
    )
    decided = "2026-05-13T11:00:00Z"

    def decision(target: str, action: str, rules: list[str], chosen: str) -> dict[str, Any]:
        return {
            "target": target,
            "stage": "final",
            "action": action,
            "decidedAt": decided,
            "defaultApplied": False,
            "trace": _trace(rules, chosen),
        }

    human = autoqa_human("2026-05-13T10:30:00+00:00") if rng.random() < 0.3 else None
    return {
        "schemaVersion": "autoqa-evaluation/0.1.0",
        "evaluationId": f"eval-{i:06d}",
        "status": "final",
        "failure": None,
        "caseRef": {"caseId": f"case-{i:06d}", "caseSha256": _sha(f"case-{i}")},
        "contractRef": {
            "contractId": contract["contractId"],
            "contractVersion": contract["contractVersion"],
            "contractSha256": contract["contractSha256"],
        },
        "canonicalization": "canonical-json-v1",
        "exactReplayExpected": False,
        "evaluator": {
            "provider": "example",
            "model": model,
            "promptTemplateId": prompt,
            "promptTemplateVersion": "3",
        },
        "calibrationProfile": {
            "profileId": "calib-code-review-2026-05",
            "model": model,
            "promptTemplateId": prompt,
            "contractId": contract["contractId"],
            "contractVersion": contract["contractVersion"],
            "criterionIds": [c["criterionId"] for c in contract["criteria"]],
            "method": "isotonic",
            "sampleSize": 1200,
        },
        "attempt": {"artifactId": "attempt", "content": attempt, "contentSha256": _sha(attempt)},
        "evidence": [
            {
                "evidenceId": "ev-spec",
                "evidenceClass": "specification",
                "title": "Task specification",
                "content": spec,
                "contentSha256": _sha(spec),
            },
            {
                "evidenceId": "ev-log",
                "evidenceClass": "test_log",
                "title": "Test run",
                "content": log,
                "contentSha256": _sha(log),
            },
        ],
        "claims": [
            {
                "claimId": "claim-1",
                "proposition": "The function keeps first-occurrence order.",
                "type": "factual",
                "importance": "central",
                "explicitness": "explicit",
                "spans": [_span("attempt", attempt, "keeps the first occurrence order")],
                "qualifiers": [],
                "citedEvidenceIds": ["ev-spec"],
            },
            {
                "claimId": "claim-2",
                "proposition": "The tests pass.",
                "type": "factual",
                "importance": "supporting",
                "explicitness": "implied",
                "spans": [_span("attempt", attempt, "list(dict.fromkeys(values))", offsets=False)],
                "qualifiers": [],
                "citedEvidenceIds": ["ev-log"],
            },
        ],
        "expectedElements": [
            {
                "elementId": "el-1",
                "criterionId": "completeness",
                "description": "Returns the unique values in input order.",
                "required": True,
                "importance": "central",
                "inferred": False,
                "acceptableAlternatives": [],
                "observedSpans": [_span("attempt", attempt, "return list(dict.fromkeys(values))")],
                "coverage": "covered",
            }
        ],
        "relationships": [
            {
                "relationshipId": "rel-1",
                "subjectId": "claim-1",
                "evidenceId": "ev-spec",
                "state": "directly_entails",
                "evidenceSpans": [_span("ev-spec", spec, "first-occurrence order")],
                "sourceQuality": "high",
                "temporalValidity": "current",
            },
            {
                "relationshipId": "rel-2",
                "subjectId": "claim-2",
                "evidenceId": "ev-log",
                "state": "reasonably_supports",
                "evidenceSpans": [_span("ev-log", log, "test_unique_order PASSED")],
                "sourceQuality": "adequate",
                "temporalValidity": "current",
            },
        ],
        "findings": findings,
        "criterionAssessments": assessments,
        "humanResolution": human,
        "decisions": [
            decision(
                "attempt",
                attempt_action,
                ["attempt-uncertain-escalate", "attempt-partial-rework", "attempt-all-met-accept"],
                attempt_rule,
            ),
            decision(
                "annotation",
                annotation_action,
                ["annotation-unsupported-rework", "annotation-supported-accept"],
                annotation_rule,
            ),
            decision(
                "composite_case",
                composite_action,
                ["composite-most-severe"],
                "composite-most-severe",
            ),
        ],
    }


GENERATORS: Final[dict[str, Callable[[random.Random, int, int], dict[str, Any]]]] = {
    "pairwise-v2": pairwise,
    "agent-trace-v1": agent_trace,
    "grounded-qa-v1": grounded_qa,
    "math-reasoning-v1": math_reasoning,
    "pw-decide-row-1": pw_decide_row,
    "ari-replication-rubric-3": ari_rubric_3,
    "ari-replication-rubric-v2": ari_rubric_v2,
    "autoqa-eval-1": autoqa_eval,
}


def make_record(kind: str, rng: random.Random, i: int, size: int = 1) -> dict[str, Any]:
    return GENERATORS[kind](rng, i, size)


def _dump(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record)


#: Every gate-level defect class, as a function of a valid record's line → a bad line.
DEFECTS: Final[dict[str, Callable[[bytes, dict[str, Any]], bytes]]] = {
    "line.blank": lambda line, rec: b"",
    "json.invalid_utf8": lambda line, rec: (
        line.replace(b'"task_id"', b'"task_\xc3\x28id"', 1)
        if b'"task_id"' in line
        else b"\xff" + line
    ),
    "json.invalid_surrogate": lambda line, rec: line[:-1] + b',"x":"\\ud800"}',
    "json.syntax": lambda line, rec: line[:-1] + b",}",
    "json.syntax/bom": lambda line, rec: b"\xef\xbb\xbf" + line,
    "json.syntax/trailing": lambda line, rec: line + b" {}",
    "json.duplicate_key": lambda line, rec: b'{"x":1,' + line[1:-1] + b',"x":2}',
    "json.non_finite": lambda line, rec: line[:-1] + b',"x":NaN}',
    "json.non_finite/overflow": lambda line, rec: line[:-1] + b',"x":1e400}',
    "json.number_range": lambda line, rec: line[:-1] + b',"x":99999999999999999999}',
    "json.too_deep": lambda line, rec: line[:-1] + b',"x":' + b"[" * 80 + b"]" * 80 + b"}",
    "json.not_object": lambda line, rec: b"[" + line + b"]",
    "schema.unsupported_version": lambda line, rec: (
        line.replace(b'"pairwise-v2"', b'"pairwise-v9"')
        if b'"schema_version"' in line
        else line.replace(b'"autoqa-evaluation/0.1.0"', b'"autoqa-evaluation/9.0.0"')
        if b'"schemaVersion"' in line
        else line.replace(b'"pw-decide-row/1"', b'"pw-decide-row/2"')
    ),
    "schema.required": lambda line, rec: _dump(
        {k: v for k, v in rec.items() if k != sorted(rec)[0]}
    ),
    "schema.additionalProperties": lambda line, rec: line[:-1] + b',"unexpected_field":true}',
}


def defect_line(defect: str, record: dict[str, Any]) -> bytes:
    return DEFECTS[defect](_dump(record), record)


class _Members(list[tuple[str, Any]]):
    """An object's members in line order, repeats kept."""


def json_dumps_layout(line: bytes) -> bytes:
    """``line`` laid out as ``json.dumps`` writes by default (``", "`` and ``": "``,
    non-ASCII as ``\\u`` escapes): how most Python code writes JSONL. What makes a line
    defective is kept (repeated keys, NaN, huge or underflowing numbers, lone
    surrogates); a line the standard library cannot read is returned as it is."""

    def text(value: Any) -> str:
        if isinstance(value, _Members):
            return "{" + ", ".join(f"{json.dumps(k)}: {text(v)}" for k, v in value) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(text(v) for v in value) + "]"
        return json.dumps(value)

    try:
        return text(json.loads(line, object_pairs_hook=_Members)).encode()
    except (ValueError, RecursionError):
        return line


def export_lines(
    kind: str,
    count: int,
    *,
    seed: int = 0,
    size: int = 1,
    defect_rate: float = 0.0,
    duplicate_rate: float = 0.0,
    first_id: int = 0,
) -> Iterator[bytes]:
    """Lines of a synthetic export: valid records, some defective, some exact repeats.

    Record ids run from ``first_id``, so consecutive calls can build one larger export."""
    rng = random.Random(seed)
    recent: list[bytes] = []
    defects = list(DEFECTS)
    for i in range(count):
        if recent and rng.random() < duplicate_rate:
            yield rng.choice(recent)
            continue
        record = make_record(kind, rng, first_id + i, size)
        if rng.random() < defect_rate:
            yield defect_line(rng.choice(defects), record)
            continue
        line = _dump(record)
        recent = [*recent[-63:], line]
        yield line


def _mutate(
    kind: str, change: Callable[[dict[str, Any]], object], **fixed: Any
) -> Callable[[int], dict[str, Any]]:
    def build(i: int) -> dict[str, Any]:
        rng = random.Random(i)
        record = make_record(kind, rng, i)
        record.update(fixed)
        change(record)
        return record

    return build


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        node: Any = record
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _all(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        for c in changes:
            c(record)

    return change


def _copy_a_to_b(record: dict[str, Any]) -> None:
    record["response_b"] = "  " + record["response_a"].upper() + "\n"


def _two_calls(record: dict[str, Any]) -> None:
    step = record["steps"][0]
    record["steps"] = [
        {**step, "call_id": "call-1", "result": {"document_ids": ["doc-001"], "success": True}},
        {**step, "call_id": "call-2", "result": {"document_ids": [], "success": True}},
    ]


def _cite(record: dict[str, Any], **changes: Any) -> None:
    text = DOCUMENTS["doc-001"]
    citation = {
        "document_id": "doc-001",
        "document_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "start": 0,
        "end": 10,
        "quote": text[:10],
    }
    citation.update(changes)
    record["citations"] = [citation]
    record["abstain"] = False


_DECISIVE: Final[dict[str, Any]] = {
    "preference": "A",
    "golden_patch": None,
    "rationale": "Response A is better because it keeps the first occurrence order.",
}
_WORKER: Final[dict[str, Any]] = {"host": "worker", "session": "s-99001", "root_session": "s-00000"}

#: For every per-record rule, a record of its kind that breaks exactly that rule (tests
#: check the "exactly"), used by the samples in data/ and by the rule tests.
RULE_VIOLATIONS: Final[dict[str, Callable[[int], dict[str, Any]]]] = {
    "semantic.pairwise-v2.distinct_candidates": _mutate("pairwise-v2", _copy_a_to_b, **_DECISIVE),
    "semantic.pairwise-v2.substantive_rationale": _mutate(
        "pairwise-v2", _set("rationale", "asdf asdf asdf asdf lorem ipsum"), **_DECISIVE
    ),
    "semantic.pairwise-v2.system_message_first": _mutate(
        "pairwise-v2",
        _set(
            "messages",
            [
                {"role": "user", "content": "Sort it."},
                {"role": "assistant", "content": "Ascending?"},
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Yes, stable."},
            ],
        ),
        **_DECISIVE,
    ),
    "semantic.pairwise-v2.alternating_turns": _mutate(
        "pairwise-v2",
        _set(
            "messages",
            [
                {"role": "user", "content": "Sort it."},
                {"role": "user", "content": "Stable, please."},
            ],
        ),
        **_DECISIVE,
    ),
    "semantic.pairwise-v2.ends_with_user_turn": _mutate(
        "pairwise-v2",
        _set(
            "messages",
            [{"role": "user", "content": "Sort it."}, {"role": "assistant", "content": "Sorted."}],
        ),
        **_DECISIVE,
    ),
    "semantic.pairwise-v2.neither_needs_patch": _mutate(
        "pairwise-v2",
        _all(_set("preference", "neither"), _set("golden_patch", " \t" * 10)),
        rationale="Neither response keeps the required ordering of values.",
    ),
    "semantic.pairwise-v2.rubric_version": _mutate(
        "pairwise-v2", _set("rubric_version", "legacy-rubric"), **_DECISIVE
    ),
    "semantic.pairwise-v2.aggregate_size": _mutate(
        "pairwise-v2",
        _set(
            "messages",
            [
                {"role": "user" if n % 2 == 0 else "assistant", "content": "m" * 32_000}
                for n in range(9)
            ],
        ),
        **_DECISIVE,
    ),
    "semantic.pairwise-v2.rationale_consistency": _mutate(
        "pairwise-v2",
        _set("rationale", "Response B is better: it is shorter and avoids the extra copy."),
        **_DECISIVE,
    ),
    "semantic.agent-trace-v1.unique_call_ids": _mutate(
        "agent-trace-v1", _all(_two_calls, _set("steps.1.call_id", "call-1"))
    ),
    "semantic.agent-trace-v1.call_order": _mutate(
        "agent-trace-v1", _all(_two_calls, _set("steps.0.call_id", "call-3"))
    ),
    "semantic.agent-trace-v1.failed_call_without_results": _mutate(
        "agent-trace-v1",
        _all(_two_calls, _set("steps.1.result", {"document_ids": ["doc-002"], "success": False})),
    ),
    "semantic.agent-trace-v1.evidence_from_successful_calls": _mutate(
        "agent-trace-v1",
        _all(
            _two_calls,
            _set("steps.1.result", {"document_ids": [], "success": False}),
            _set("final_answer", "According to doc-002 the answer is yes."),
        ),
    ),
    "semantic.agent-trace-v1.authorised_documents": _mutate(
        "agent-trace-v1",
        _all(_two_calls, _set("steps.0.result", {"document_ids": ["doc-999"], "success": True})),
    ),
    "semantic.agent-trace-v1.aggregate_size": _mutate(
        "agent-trace-v1",
        _all(
            _set("prompt", "p" * 32_000),
            _set("final_answer", "f" * 32_000),
            _set("steps.0.arguments.query", "q" * 1_600),
        ),
    ),
    "semantic.grounded-qa-v1.span_order": _mutate(
        "grounded-qa-v1", lambda r: _cite(r, start=10, end=10, quote="x")
    ),
    "semantic.grounded-qa-v1.document_digest": _mutate(
        "grounded-qa-v1", lambda r: _cite(r, document_sha256="0" * 64)
    ),
    "semantic.grounded-qa-v1.span_in_document": _mutate(
        "grounded-qa-v1", lambda r: _cite(r, start=5, end=len(DOCUMENTS["doc-001"]) + 5)
    ),
    "semantic.grounded-qa-v1.quote_matches_span": _mutate(
        "grounded-qa-v1", lambda r: _cite(r, quote="not the span")
    ),
    "semantic.math-reasoning-v1.non_blank_steps": _mutate(
        "math-reasoning-v1", _set("derivation.0", " \u00a0 ")
    ),
    "semantic.math-reasoning-v1.non_blank_answer": _mutate(
        "math-reasoning-v1", _set("final_answer", "\u3000")
    ),
    "semantic.math-reasoning-v1.unique_assumptions": _mutate(
        "math-reasoning-v1", _set("assumptions", ["Integers are exact", "integers  are EXACT"])
    ),
    "semantic.pw-decide-row-1.coordinator_is_its_own_root": _mutate(
        "pw-decide-row-1", _set("root_session", "s-77777"), host="coordinator"
    ),
    "semantic.pw-decide-row-1.worker_has_a_coordinator": _mutate(
        "pw-decide-row-1", _set("root_session", "s-99001"), **_WORKER
    ),
    "semantic.pw-decide-row-1.partial_iff_no_kind": _mutate(
        "pw-decide-row-1", _set("labels.kind", None), partial=False
    ),
    "semantic.pw-decide-row-1.partial_labels_only_requests": _mutate(
        "pw-decide-row-1",
        lambda r: r["labels"].update(skills=["refactor"], tools=[], kind=None),
        partial=True,
    ),
    "semantic.pw-decide-row-1.tools_offered": _mutate(
        "pw-decide-row-1",
        _all(_set("labels.tools", ["not_offered"]), _set("labels.kind", "run")),
        partial=False,
    ),
    "semantic.pw-decide-row-1.guides_offered": _mutate(
        "pw-decide-row-1", _set("labels.guides", {"unlisted": True})
    ),
    "semantic.pw-decide-row-1.engine_choices_offered": _mutate(
        "pw-decide-row-1",
        _set(
            "engine",
            {"state": "answered", "reason": "x", "preloaded": [], "omitted": ["not_offered"]},
        ),
    ),
    "semantic.pw-decide-row-1.abstained_carries_nothing": _mutate(
        "pw-decide-row-1",
        lambda r: r["engine"].update(state="abstained", preloaded=r["offered"]["loadable"][:1]),
    ),
    "semantic.pw-decide-row-1.answer_only_calls_no_tools": _mutate(
        "pw-decide-row-1",
        lambda r: r["labels"].update(kind="answer_only", tools=r["offered"]["loadable"][:1]),
        partial=False,
    ),
    "semantic.pw-decide-row-1.judged_scores_name_their_judge": _mutate(
        "pw-decide-row-1",
        lambda r: (r.pop("judge"), r["labels"]["requests"][0].update(scores={"grep": 3})),
    ),
}


def _ari(
    kind: str, change: Callable[[dict[str, Any]], object], *, corrupt_digest: bool = False
) -> Callable[[int], dict[str, Any]]:
    """An unflagged ARI envelope changed by ``change``, its rubric_sha256 recomputed
    afterwards (or corrupted) so only the targeted rule fires."""
    excluded = (
        ("rubric_sha256", "audit") if kind == "ari-replication-rubric-3" else ("rubric_sha256",)
    )

    def build(i: int) -> dict[str, Any]:
        record = make_record(kind, random.Random(i), i)
        _flag_leaves(0.0)(record)
        change(record)
        record = _envelope(record, excluded)
        if corrupt_digest:
            record["rubric_sha256"] = "0" * 64
        return record

    return build


def _first_leaf(record: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = record["rubric"]
    while node.get("sub_tasks"):
        node = node["sub_tasks"][0]
    return node


def _flag_leaves(share: float) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        stack, found = [record["rubric"]], []
        while stack:
            node = stack.pop()
            node.pop("flags", None)
            if node.get("sub_tasks"):
                stack.extend(node["sub_tasks"])
            else:
                found.append(node)
        for node in found[: round(share * len(found))]:
            node["flags"] = ["unverifiable"]

    return change


for _kind_id in ("ari-replication-rubric-3", "ari-replication-rubric-v2"):
    RULE_VIOLATIONS[f"semantic.{_kind_id}.rubric_sha256"] = _ari(
        _kind_id, lambda r: None, corrupt_digest=True
    )
    RULE_VIOLATIONS[f"semantic.{_kind_id}.unique_node_ids"] = _ari(
        _kind_id, lambda r: r["rubric"]["sub_tasks"][1].update(id=r["rubric"]["sub_tasks"][0]["id"])
    )
    RULE_VIOLATIONS[f"semantic.{_kind_id}.node_ids_are_uuids"] = _ari(
        _kind_id, lambda r: r["rubric"].update(id="root-node")
    )
    RULE_VIOLATIONS[f"semantic.{_kind_id}.leaf_only_fields"] = _ari(
        _kind_id, lambda r: r["rubric"].update(task_category="Code Development")
    )
    RULE_VIOLATIONS[f"semantic.{_kind_id}.weighted_children"] = _ari(
        _kind_id, lambda r: [c.update(weight=0) for c in r["rubric"]["sub_tasks"]]
    )
RULE_VIOLATIONS["semantic.ari-replication-rubric-3.flagged_leaves_share"] = _ari(
    "ari-replication-rubric-3", _flag_leaves(0.5)
)
RULE_VIOLATIONS["semantic.ari-replication-rubric-v2.evidence_span_range"] = _ari(
    "ari-replication-rubric-v2",
    lambda r: _first_leaf(r)["evidence_span"].update(start_char=5, end_char=5),
)


def _assessed(record: dict[str, Any], criterion: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        a for a in record["criterionAssessments"] if a["criterionId"] == criterion
    )
    return found


def _decided(record: dict[str, Any], target: str) -> dict[str, Any]:
    found: dict[str, Any] = next(d for d in record["decisions"] if d["target"] == target)
    return found


def _draft_contract(record: dict[str, Any]) -> None:
    draft = AUTOQA_CONTRACTS[1]
    record["contractRef"].update(
        contractVersion=draft["contractVersion"], contractSha256=draft["contractSha256"]
    )
    # a profile fitted on the draft: another profile than the approved version's
    record["calibrationProfile"].update(
        profileId="calib-code-review-draft", contractVersion=draft["contractVersion"]
    )


def _answer_after_decision(record: dict[str, Any]) -> None:
    record["humanResolution"] = autoqa_human("2026-05-13T11:30:00Z")  # decided at 11:00Z


def _other_composite(record: dict[str, Any]) -> None:
    composite = _decided(record, "composite_case")
    composite["action"] = "reject" if composite["action"] != "reject" else "accept"


def _extra_target(record: dict[str, Any]) -> None:
    record["decisions"].append(
        {**_decided(record, "annotation"), "target": "feedback", "action": "accept", "trace": []}
    )


def _wrong_rule(record: dict[str, Any]) -> None:
    step = next(s for s in _decided(record, "attempt")["trace"] if s["matched"])
    step["ruleId"] = "annotation-supported-accept"


_AUTOQA: Final = "semantic.autoqa-eval-1."
RULE_VIOLATIONS.update(
    {
        _AUTOQA + "unique_ids": _mutate(
            "autoqa-eval-1", lambda r: r["relationships"][1].update(relationshipId="rel-1")
        ),
        _AUTOQA + "finding_refs_exist": _mutate(
            "autoqa-eval-1", lambda r: _assessed(r, "grounding")["findingIds"].append("f-9")
        ),
        _AUTOQA + "claim_element_refs_exist": _mutate(
            "autoqa-eval-1", lambda r: r["findings"][0]["claimIds"].append("claim-9")
        ),
        _AUTOQA + "relationship_refs_exist": _mutate(
            "autoqa-eval-1", _set("relationships.1.subjectId", "claim-9")
        ),
        _AUTOQA + "evidence_refs_exist": _mutate(
            "autoqa-eval-1", lambda r: r["claims"][0]["citedEvidenceIds"].append("ev-9")
        ),
        _AUTOQA + "evidence_permitted": _mutate(
            "autoqa-eval-1", lambda r: r["findings"][0]["evidenceIds"].append("ev-log")
        ),
        _AUTOQA + "span_in_artifact": _mutate(
            "autoqa-eval-1", _set("claims.1.spans.0.quote", "a quote that occurs nowhere")
        ),
        _AUTOQA + "span_offsets_match": _mutate(
            "autoqa-eval-1",
            lambda r: r["claims"][0]["spans"][0].update(
                start=r["claims"][0]["spans"][0]["start"] + 1,
                end=r["claims"][0]["spans"][0]["end"] + 1,
            ),
        ),
        _AUTOQA + "content_hashes": _mutate(
            "autoqa-eval-1", _set("evidence.1.contentSha256", "0" * 64)
        ),
        _AUTOQA + "acyclic_dependencies": _mutate(
            "autoqa-eval-1", lambda r: _assessed(r, "grounding").update(dependsOn=["warrant"])
        ),
        _AUTOQA + "human_response_before_final": _mutate("autoqa-eval-1", _answer_after_decision),
        _AUTOQA + "calibration_profile_compatible": _mutate(
            "autoqa-eval-1",
            lambda r: r["calibrationProfile"].update(
                profileId="calib-other-model", model="example/evaluator-0"
            ),
        ),
        _AUTOQA + "failure_status": _mutate(
            "autoqa-eval-1",
            _set("failure", {"class": "model_timeout_or_provider_error", "detail": "timed out"}),
        ),
        _AUTOQA + "applicability_first": _mutate(
            "autoqa-eval-1",
            lambda r: _assessed(r, "completeness").update(
                applicability="does_not_apply", verdict="met", findingIds=["f-2"]
            ),
        ),
        _AUTOQA + "proof_invariants": _mutate(
            "autoqa-eval-1", lambda r: _assessed(r, "correctness").update(findingIds=[])
        ),
        _AUTOQA + "contract_resolves": _mutate(
            "autoqa-eval-1", _set("contractRef.contractSha256", "f" * 64)
        ),
        _AUTOQA + "contract_approved": _mutate("autoqa-eval-1", _draft_contract),
        _AUTOQA + "criterion_in_contract": _mutate(
            "autoqa-eval-1", lambda r: r["findings"][1]["criterionIds"].append("style")
        ),
        _AUTOQA + "decision_target_declared": _mutate("autoqa-eval-1", _extra_target),
        _AUTOQA + "triggered_rule_declared": _mutate("autoqa-eval-1", _wrong_rule),
        _AUTOQA + "composite_policy": _mutate("autoqa-eval-1", _other_composite),
    }
)


# -- planted PII and credentials (sanitization tests and benchmarks) --------------------

_BASE62: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _random(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _cpf(rng: random.Random) -> str:
    digits = [rng.randint(0, 9) for _ in range(9)]
    for length in (9, 10):
        total = sum(d * w for d, w in zip(digits, range(length + 1, 1, -1), strict=False))
        digits.append(total * 10 % 11 % 10)
    text = "".join(map(str, digits))
    return f"{text[:3]}.{text[3:6]}.{text[6:9]}-{text[9:]}"


def planted_secrets(rng: random.Random, i: int) -> dict[str, str]:
    """One fake value of every category the sanitizer knows, distinct for each ``i``.

    None is real: addresses are at made-up domains, numbers are fictional, keys are
    random. Every value is long and random enough to be searched for in output bytes.
    """
    number = rng.randint(10_000_000, 99_999_999)
    return {
        "email": f"ana.{i}.{_random(rng, 'abcdefghij', 6)}@mail-{i % 97}.corp-example.de",
        "phone": f"+1 415-555-{rng.randint(2000, 9999)}",
        "ipv4": f"81.{rng.randint(1, 254)}.{rng.randint(1, 254)}.{rng.randint(1, 254)}",
        "ipv6": f"2a00:1450:{rng.randint(0x1000, 0xFFFF):x}::{rng.randint(0x1000, 0xFFFF):x}",
        "ssn": f"{rng.randint(100, 665):03d}-{rng.randint(10, 99):02d}-{rng.randint(1000, 9999):04d}",
        "cpf": _cpf(rng),
        "dni": f"{number}{'TRWAGMYFPDXBNJZSQVHLCKE'[number % 23]}",
        "openai": "sk-proj-" + _random(rng, _BASE62, 40),
        "github": "ghp_" + _random(rng, _BASE62, 36),
        "aws": "AKIA" + _random(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16),
        "bearer": _random(rng, _BASE62, 24) + "." + _random(rng, _BASE62, 12),
        "password": "pw-" + _random(rng, _BASE62, 18),
    }


def plant_pii(
    record: dict[str, Any], rng: random.Random, i: int
) -> tuple[dict[str, Any], list[str]]:
    """A pairwise-v2 record with one secret of every category planted in its free text
    (and code that still parses); returns the record and the planted values."""
    secrets = planted_secrets(rng, i)
    planted = dict(record)
    planted["rationale"] = (
        f"{record['rationale']} Reviewer: {secrets['email']}, {secrets['phone']}, SSN "
        f"{secrets['ssn']}, CPF {secrets['cpf']}, DNI {secrets['dni']}, host "
        f"{secrets['ipv4']} / {secrets['ipv6']}."
    )
    messages = [dict(m) for m in record["messages"]]
    messages[-1]["content"] = (
        f"{messages[-1]['content']}\nAuthorization: Bearer {secrets['bearer']}\n"
        f"my token is {secrets['github']}"
    )
    planted["messages"] = messages
    planted["response_a"] = f'{record["response_a"]}\nOPENAI_KEY = "{secrets["openai"]}"'
    planted["response_b"] = (
        f'{record["response_b"]}\naws_id = "{secrets["aws"]}"\npassword = "{secrets["password"]}"'
    )
    return planted, list(secrets.values())
