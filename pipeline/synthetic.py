"""Synthetic exports: valid records of every kind, and lines with every defect class.

Deterministic for a seed. Used by ``data/generate.py`` (the bundled samples), by the
benchmarks (large pairwise exports) and by tests. No real people or data are involved.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from typing import Any, Final

import orjson

__all__ = [
    "DEFECTS",
    "GENERATORS",
    "defect_line",
    "export_lines",
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
        "rationale": "Response A is better because " + _text(rng, 12 * size),
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
    coordinator = rng.random() < 0.6 or i < 4
    session = f"s-{i:05d}"
    root = session if coordinator else f"s-{(i // 4) * 4:05d}"
    tools = [] if partial else sorted(rng.sample(loadable, rng.randint(0, 2)))
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
            "state": rng.choice(["answered", "abstained"]),
            "reason": "confident",
            "preloaded": tools[:1],
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
            "kind": None
            if partial
            else rng.choice(["answer_only", "inspect", "change", "run", "delegate"]),
            "guides": {g: rng.choice([True, False, None]) for g in guides},
        },
        "meta": {"task": f"t-{i % 7}", "group": f"g-{i % 5}"},
    }


GENERATORS: Final[dict[str, Callable[[random.Random, int, int], dict[str, Any]]]] = {
    "pairwise-v2": pairwise,
    "agent-trace-v1": agent_trace,
    "grounded-qa-v1": grounded_qa,
    "math-reasoning-v1": math_reasoning,
    "pw-decide-row-1": pw_decide_row,
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
        else line.replace(b'"pw-decide-row/1"', b'"pw-decide-row/2"')
    ),
    "schema.required": lambda line, rec: _dump(
        {k: v for k, v in rec.items() if k != sorted(rec)[0]}
    ),
    "schema.additionalProperties": lambda line, rec: line[:-1] + b',"unexpected_field":true}',
}


def defect_line(defect: str, record: dict[str, Any]) -> bytes:
    return DEFECTS[defect](_dump(record), record)


def export_lines(
    kind: str,
    count: int,
    *,
    seed: int = 0,
    size: int = 1,
    defect_rate: float = 0.0,
    duplicate_rate: float = 0.0,
) -> Iterator[bytes]:
    """Lines of a synthetic export: valid records, some defective, some exact repeats."""
    rng = random.Random(seed)
    recent: list[bytes] = []
    defects = list(DEFECTS)
    for i in range(count):
        if recent and rng.random() < duplicate_rate:
            yield rng.choice(recent)
            continue
        record = make_record(kind, rng, i, size)
        if rng.random() < defect_rate:
            yield defect_line(rng.choice(defects), record)
            continue
        line = _dump(record)
        recent = [*recent[-63:], line]
        yield line


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
