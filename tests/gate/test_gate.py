"""The gate: routing, every defect class, and the fast path against the reference path."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.core.config import CampaignConfig, Limits, SanitizeSettings
from pipeline.core.reasons import Disposition, Reason
from pipeline.gate.gate import Gate, GateOutcome
from pipeline.gate.reader import LineBatch
from pipeline.records.strict_json import MAX_NESTING
from pipeline.testing.synthetic import (
    DEFECTS,
    GENERATORS,
    defect_line,
    json_dumps_layout,
    make_record,
)

EXAMPLE = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "seed000_annotation.json").read_text(
        "utf-8"
    )
)
GATE = Gate(CampaignConfig(limits=Limits(max_line_bytes=64 * 1024)))


def _codes(line: bytes, declared: str | None = None) -> list[str]:
    return [r.code for r in GATE.gate_line(line, declared).reasons]


def test_seed_example_is_accepted_with_lineage() -> None:
    line = json.dumps(EXAMPLE).encode()
    outcome = GATE.gate_line(line)
    assert outcome.disposition is Disposition.ACCEPTED
    assert outcome.kind == "pairwise-v2"
    assert (
        outcome.content_sha256 == "0cf9c43c7e10c09239a6371f0a689a1acece7d5cecad924ec8686dc4484d26de"
    )
    assert len(outcome.raw_sha256) == len(outcome.record_sha256 or "") == 64


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_every_defect_class_gets_its_reason(defect: str) -> None:
    line = defect_line(defect, EXAMPLE)
    expected = defect.split("/")[0]
    assert _codes(line)[0] == expected


def test_oversized_line_is_rejected_unparsed() -> None:
    outcome = GATE.gate_line(b"x" * (64 * 1024 + 1))
    assert [r.code for r in outcome.reasons] == ["line.too_large"]


@pytest.mark.parametrize(
    ("record", "declared", "code"),
    [
        ({**EXAMPLE, "schema_version": "pairwise-v3"}, None, "schema.unsupported_version"),
        ({**EXAMPLE, "schema_version": 2}, None, "schema.unsupported_version"),
        (
            {k: v for k, v in EXAMPLE.items() if k != "schema_version"},
            None,
            "schema.unsupported_version",
        ),
        (
            {k: v for k, v in EXAMPLE.items() if k != "schema_version"},
            "pairwise-v2",
            "schema.required",
        ),
        ({**EXAMPLE, "schema_version": "pairwise-v3"}, "pairwise-v2", "schema.unsupported_version"),
        (EXAMPLE, "agent-trace-v1", "schema.additionalProperties"),
    ],
)
def test_routing(record: dict[str, Any], declared: str | None, code: str) -> None:
    assert code in _codes(orjson.dumps(record), declared)


def test_kind_without_version_field_needs_a_declaration() -> None:
    record = make_record("math-reasoning-v1", random.Random(0), 1)
    assert _codes(orjson.dumps(record)) == ["schema.unsupported_version"]
    assert _codes(orjson.dumps(record), "math-reasoning-v1") == []


def test_parse_errors_take_precedence_over_schema_errors() -> None:
    too_deep = {**EXAMPLE, "rationale": [[[[[[]]]]]], "extra": True}
    gate = Gate(CampaignConfig(limits=Limits(max_depth=4)))
    assert [r.code for r in gate.gate_line(orjson.dumps(too_deep)).reasons] == ["json.too_deep"]


def test_schema_rejection_lists_every_violation() -> None:
    bad = {**EXAMPLE, "preference": "C", "ratings": {**EXAMPLE["ratings"], "style": "5"}}
    assert sorted(_codes(orjson.dumps(bad))) == ["schema.enum", "schema.type"]


def test_json_dumps_layout_keeps_what_makes_a_line_defective() -> None:
    """The corpus's second layout (pipeline.testing.synthetic) must keep each defect."""
    assert json_dumps_layout(b'{"a":[1,{"b":"\xc3\xa9"}]}') == b'{"a": [1, {"b": "\\u00e9"}]}'
    assert json_dumps_layout(b'{"a":1,"a":NaN}') == b'{"a": 1, "a": NaN}'
    assert json_dumps_layout(b'{"a":"\\ud800","b":100000000000000000000}') == (
        b'{"a": "\\ud800", "b": 100000000000000000000}'
    )
    assert json_dumps_layout(b'{"a":1,}') == b'{"a":1,}'  # unreadable: left as it is


def _corpus() -> list[tuple[bytes, str | None]]:
    """Valid rows of every kind, every defect class on every kind (compact and in
    json.dumps' layout), odd shapes."""
    rng = random.Random(7)
    lines: list[tuple[bytes, str | None]] = []
    for kind in sorted(GENERATORS):
        declared = None if kind in ("pairwise-v2", "pw-decide-row-1", "autoqa-eval-1") else kind
        for i in range(40):
            record = make_record(kind, rng, i)
            lines.append((orjson.dumps(record), declared))
            lines.append(
                (json.dumps(record, indent=None, separators=(", ", ": ")).encode(), declared)
            )
        defects = [defect_line(d, make_record(kind, rng, 999)) for d in sorted(DEFECTS)]
        lines += [(line, declared) for line in defects]
        lines += [(spaced, declared) for spaced in map(json_dumps_layout, defects)]
    with_float = {**EXAMPLE, "ratings": {**EXAMPLE["ratings"], "style": 4.0}}
    math_float = {**make_record("math-reasoning-v1", rng, 6), "reasoning_score": 3.0}
    decide = make_record("pw-decide-row-1", rng, 5)
    huge = 2**64 - 1  # orjson reads it as an int; the contract says int64
    lines += [
        (orjson.dumps(with_float), None),  # an integral float in an integer field
        (orjson.dumps(math_float), "math-reasoning-v1"),  # the same, at the top level
        (b'{"schema":"pw-decide-row/1","\\ue000":1}', None),
        (b"x" * 70_000, None),
        (b"  ", None),
        # orjson-canonical lines (the fast parser's domain) with its blind spots:
        (orjson.dumps({**decide, "receipt": huge}), None),  # unbounded integer field
        (orjson.dumps({**EXAMPLE, "ratings": {**EXAMPLE["ratings"], "style": huge}}), None),
        (orjson.dumps({**decide, "meta": {"f": 1.5e-7, "g": -0.0, "h": 1e21}}), None),
        (orjson.dumps({**decide, "meta": {"\U0001f600": 1, "\uffff": 2}}), None),
        (orjson.dumps({**decide, "receipt": 2**63 - 1}), None),
        (orjson.dumps({**decide, "receipt": -(2**63)}), None),
        (b'{"a":1,"a":1}', None),  # a duplicate whose value orjson would happily keep
        # other layouts (the fast parser's member count) with its blind spots:
        (json_dumps_layout(orjson.dumps({**decide, "receipt": huge})), None),
        (json_dumps_layout(orjson.dumps({**decide, "meta": {"f": 1.5e-7, "g": -0.0}})), None),
        (
            json_dumps_layout(orjson.dumps({**decide, "meta": {"a": "x:y"}}))[:-1]
            + b', "meta": 1}',
            None,
        ),
        (  # a valid record behind a repeat, and escaped colons that would hide it
            b'{"meta": {"task": "t-5", "group": "g-0"}, '
            + (json_dumps_layout(orjson.dumps({**decide, "project": "p:::"})))[1:].replace(
                b'"p:::"', b'"p\\u003a\\u003a\\u003a"'
            ),
            None,
        ),
        (json_dumps_layout(orjson.dumps({**decide, "meta": {"a": 1}}))[:-2] + b', "a": 2}}', None),
        (json_dumps_layout(orjson.dumps({**decide, "meta": {"k": 1}}))[:-2] + b"e-400}}", None),
    ]
    return lines


@pytest.mark.slow
def test_fast_path_matches_reference_path() -> None:
    """Dispositions, reasons and every hash agree line by line (issue 3 acceptance)."""
    _assert_paths_agree(GATE, _corpus())


def test_deep_lines_gate_alike_on_both_paths() -> None:
    """Deep nesting crashed the gate: the fast path beyond what orjson writes (254
    levels) in its compact-form proof, then, in json.dumps' layout at ~995-1023 levels
    (orjson reads up to 1024, the standard library's scanner less), in the limits walk;
    both paths from ~450 levels when the line held a surrogate escape. All now say
    json.too_deep (or json.invalid_surrogate), alike. At the deepest configurable
    limit, records at and past it gate alike on both paths too."""
    depths = (254, 300, 600, 995, 1010, 1023, 1500)
    deep = [b'{"a":' + b"[" * n + b"]" * n + b"}" for n in depths]
    spaced = [b'{"a": ' + b"[" * n + b"]" * n + b"}" for n in depths]
    # a surrogate escape sends the strict parser looking for lone ones (it recursed, and
    # crashed both paths from ~450 levels)
    escaped = [b'{"s":"\\ud83d\\ude00","a":' + b"[" * n + b"]" * n + b"}" for n in depths]
    lone = [b'{"s":"\\ud800","a":' + b"[" * n + b"]" * n + b"}" for n in depths]
    codes = _assert_paths_agree(GATE, [(line, None) for line in deep + spaced + escaped + lone])
    lone_codes = codes[-len(depths) :]
    assert lone_codes[:2] == [["json.invalid_surrogate"]] * 2  # 254, 300 levels
    assert lone_codes[2:] == [["json.too_deep"]] * 5  # beyond the parser's bound (512)
    # With sanitization on, a rejected line's raw bytes are screened for secrets, which
    # walked orjson's value recursively (crashing at ~1000 levels); a deep secret counts.
    sanitizing = Gate(CampaignConfig(sanitize=SanitizeSettings(enabled=True)))
    secret = b'{"a":' + b"[" * 1000 + b'{"api_key":"Zx81kQ7vLp02mNa9Bc4Hd6Ty"}' + b"]" * 1000
    screened = _assert_paths_agree(sanitizing, [(line, None) for line in [*deep, secret + b"}"]])
    assert screened[-1] == ["json.too_deep", "pii.raw_withheld"]
    decide = make_record("pw-decide-row-1", random.Random(3), 1)
    lines = []
    for depth in (MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1, 400, 995, 1010, 1023):
        record = {**decide, "meta": {**decide["meta"], "x": "X"}}
        for layout in (json.dumps(record), json.dumps(record, separators=(",", ":"))):
            nested = "[" * (depth - 2) + "]" * (depth - 2)
            lines.append((layout.replace('"X"', nested).encode(), None))
    deepest = Gate(CampaignConfig(limits=Limits(max_line_bytes=64 * 1024, max_depth=MAX_NESTING)))
    for gate in (GATE, deepest):
        codes = _assert_paths_agree(gate, lines)
        limit = gate.config.limits.max_depth
        assert codes[:4] == [[] if limit == MAX_NESTING else ["json.too_deep"]] * 4
        assert codes[4:] == [["json.too_deep"]] * (len(lines) - 4)


def test_huge_integers_gate_alike_on_both_paths() -> None:
    """An integer of 4301+ digits crashed the reference path (Python's int-conversion
    limit); on both paths it is now json.number_range, at the top level or nested, in
    either layout."""
    decide = make_record("pw-decide-row-1", random.Random(4), 1)
    numbers = [
        sign + digit * n for n in (4300, 4301, 50_000) for sign, digit in (("", "9"), ("-", "1"))
    ]
    records = ({**decide, "receipt": "X"}, {**decide, "meta": {"n": ["X"]}})
    layouts = [json.dumps(r, separators=s) for r in records for s in ((", ", ": "), (",", ":"))]
    lines = [(layout.replace('"X"', n).encode(), None) for layout in layouts for n in numbers]
    codes = _assert_paths_agree(GATE, lines)
    assert codes == [["json.number_range"]] * len(lines)


_TOKENS = (
    b'"', b"\\", b"{", b"}", b"[", b"]", b":", b",", b" ", b"\t", b"\r", b"\x00", b"\xff",
    b"\xc3\xa9", b"\\u003a", b"\\ud800", b"\\ud83d\\ude00", b'\\"', b"\\n", b"1e-400",
    b"1e400", b"18446744073709551615", b"99999999999999999999999", b"-0", b"0.0", b"1.5",
    b"NaN", b"null", b"true", b'"a":1,',
)  # fmt: skip
_ODD_VALUES = (None, 1.5, -0.0, 2**63, 2**64, "", "x:y", [], {}, [[[]]], {"\ue000": 1}, 4.0, 1e19)


def _mutated(rng: random.Random, record: dict[str, Any]) -> bytes:
    """``record`` with a member changed, removed, added or repeated, compact or in
    json.dumps' layout, then (mostly) with a few bytes deleted, inserted or repeated."""
    value = json.loads(json.dumps(record))
    keys = sorted(value)
    op = rng.randrange(4)
    if op == 0:
        value[rng.choice(keys)] = rng.choice(_ODD_VALUES)
    elif op == 1:
        del value[rng.choice(keys)]
    elif op == 2:
        value[rng.choice(["extra", "\ue001", "a:b", "é"])] = rng.choice([1, "v", None, [1, 2]])
    compact = rng.random() < 0.4
    line = json.dumps(value, separators=(",", ":") if compact else None).encode()
    if op == 3 and value:  # a member repeated, same value: schema-valid, only strictness says no
        key = rng.choice(sorted(value))
        repeat = json.dumps({key: value[key]}, separators=(",", ":") if compact else None)
        line = repeat.encode()[:-1] + b"," + line[1:]
    if rng.random() < 0.4:
        return line
    data = bytearray(line)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(data))
        choice = rng.random()
        if choice < 0.3:
            del data[at : at + rng.randint(1, 5)]
        elif choice < 0.7:
            data[at:at] = rng.choice(_TOKENS)
        else:
            start = rng.randint(0, len(data))
            data[at:at] = data[start : start + rng.randint(1, 40)]
    return bytes(data)


@pytest.mark.slow
def test_mutated_lines_gate_alike_on_both_paths() -> None:
    """A seeded differential fuzz: valid records of every kind, changed structurally and
    byte by byte, gate alike on the batch path and the reference path, with the default
    limits and with tight ones (an ad-hoc run of 240k such cases found no difference)."""
    rng = random.Random(2026)
    corpus = []
    for i in range(700):
        kind = sorted(GENERATORS)[i % len(GENERATORS)]
        declared = kind if rng.random() < 0.5 else None
        corpus.append((_mutated(rng, make_record(kind, rng, i)), declared))
    _assert_paths_agree(GATE, corpus)
    tight = Gate(CampaignConfig(limits=Limits(max_line_bytes=4096, max_depth=4, max_items=8)))
    _assert_paths_agree(tight, corpus)


def _assert_paths_agree(gate: Gate, corpus: list[tuple[bytes, str | None]]) -> list[list[str]]:
    """Gate ``corpus`` on the batch path and line by line on the reference path; both
    must give every line the same disposition, kind, reasons and hashes. Returns the
    reason codes, in corpus order."""
    by_declared: dict[str | None, list[tuple[int, bytes]]] = {}
    for position, (line, declared) in enumerate(corpus):
        by_declared.setdefault(declared, []).append((position, line))
    codes: list[list[str]] = [[] for _ in corpus]
    compared = 0
    for declared, numbered in by_declared.items():
        lines = [line for _, line in numbered]
        batch = LineBatch(first_line=1, offsets=list(range(len(lines))), lines=lines)
        gated = gate.gate_batch(batch, declared)
        fast: dict[int, tuple[Any, ...]] = {}
        for kind_id, table in gated.kinds.items():
            for row in table.to_pylist():
                fast[row["_shard_line"]] = (
                    row["_disposition"], kind_id, [r["code"] for r in row["_reasons"]],
                    row["_raw_sha256"], row["_record_sha256"], row["_content_sha256"], row["_schema_sha256"],
                )  # fmt: skip
        if gated.rejected is not None:
            for row in gated.rejected.to_pylist():
                fast[row["_shard_line"]] = (
                    "rejected", row["_kind"], [r["code"] for r in row["_reasons"]],
                    row["_raw_sha256"], row["_record_sha256"], row["_content_sha256"], row["_schema_sha256"],
                )  # fmt: skip
        assert sorted(fast) == list(range(1, len(lines) + 1))
        for n, (position, line) in enumerate(numbered, 1):
            ref = gate.gate_line(line, declared)
            expected = (
                ref.disposition.value, ref.kind, [r.code for r in ref.reasons],
                ref.raw_sha256, ref.record_sha256, ref.content_sha256, ref.schema_sha256,
            )  # fmt: skip
            assert fast[n] == expected, (declared, n, line[:80])
            codes[position] = expected[2]
            compared += 1
    assert compared == len(corpus)
    return codes


@pytest.mark.parametrize(
    ("kind", "path", "value", "rejected"),
    [
        ("pw-decide-row-1", ("receipt",), 1e19, True),
        ("pw-decide-row-1", ("receipt",), -9.3e18, True),
        ("pw-decide-row-1", ("receipt",), 1e21, True),
        ("pw-decide-row-1", ("receipt",), 9.2e18, False),  # within int64
        ("pw-decide-row-1", ("receipt",), 12.0, False),
        ("grounded-qa-v1", ("citations", 0, "start"), 1e19, True),  # inside a list
        ("ari-replication-rubric-v2", ("generator", "seed"), 1e19, True),  # in a struct
    ],
)
def test_an_integral_float_beyond_int64_in_an_integer_field_is_rejected_alike_on_both_paths(
    kind: str, path: tuple[str | int, ...], value: float, rejected: bool
) -> None:
    """JSON Schema counts 1e19 as an integer, and int64 cannot hold it: one such line
    (json.dumps writes large floats so) stopped the whole run with an internal error
    (exit 4) when its batch became Arrow columns. It is rejected, as an integer literal
    beyond int64 is, in ``json.dumps``' layout (``1e+19``) and orjson's (``1e19``)."""
    record = make_record(kind, random.Random(11), 3)
    node: Any = record
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    declared = None if kind in ("pw-decide-row-1",) else kind
    lines = [(orjson.dumps(record), declared), (json.dumps(record).encode(), declared)]
    codes = _assert_paths_agree(GATE, lines)
    assert codes == ([["json.number_range"]] * 2 if rejected else [[], []])


def test_corpus_covers_every_defect_class() -> None:
    seen = set()
    for line, declared in _corpus():
        seen |= {r.code for r in GATE.gate_line(line, declared).reasons}
    gate_codes = {d.split("/")[0] for d in DEFECTS} | {"line.too_large"}
    assert gate_codes <= seen


def test_gate_codes_are_documented_in_check_order() -> None:
    """A line with several defects gets the earliest code of GATE_CODES."""
    from pipeline.core.reasons import GATE_CODES

    # invalid UTF-8 beats everything after it; a duplicate key beats not-an-object depth
    assert _codes(b'\xff{"a":1,"a":2}') == ["json.invalid_utf8"]
    assert _codes(b'[{"a":1,"a":2}]') == ["json.duplicate_key"]
    assert _codes(b'["\\ud800"]') == ["json.invalid_surrogate"]
    assert _codes(b"[" * 70 + b"]" * 70) == ["json.not_object"]
    order = {code: i for i, code in enumerate(GATE_CODES)}
    assert order["json.invalid_surrogate"] < order["json.not_object"] < order["json.too_deep"]


def test_a_missing_required_field_is_named() -> None:
    """Issue 17: schema.required listed every required field, truncated with "…", and
    never said which was missing. A field name is schema vocabulary: it is named."""
    without = {k: v for k, v in EXAMPLE.items() if k not in ("preference", "rationale")}
    ratings = {k: v for k, v in EXAMPLE["ratings"].items() if k != "style"}
    reasons = GATE.gate_line(orjson.dumps({**without, "ratings": ratings})).reasons
    required = [(r.path, r.detail) for r in reasons if r.code == "schema.required"]
    assert required == [("$", "missing preference, rationale"), ("$.ratings", "missing style")]


@pytest.mark.parametrize("declared", [None, "pairwise-v2"])
@pytest.mark.parametrize(
    ("edit", "code", "path"),
    [
        # a declared name as it is, a map key never (values may be secrets)
        (lambda t: t[:-1] + ', "preference": "A"}', "json.duplicate_key", "$.preference"),
        (
            lambda t: t.replace('"ratings": {', '"ratings": {"style": 1, ', 1),
            "json.duplicate_key",
            "$.ratings.style",
        ),
        (
            lambda t: t[:-1] + ', "sk-secret": {"k": 1, "k": 2}}',
            "json.duplicate_key",
            "$.*.*",
        ),
        (
            lambda t: re.sub(r'"style": [0-9.]+', '"style": NaN', t, count=1),
            "json.non_finite",
            "$.ratings.style",
        ),
        # both: the repeated key, checked first (the number is read before the object closes)
        (
            lambda t: t.replace('"ratings": {', '"ratings": {"style": NaN, ', 1),
            "json.duplicate_key",
            "$.ratings.style",
        ),
        (lambda t: t[:-1] + ', "sk-secret": 1e999}', "json.non_finite", "$.*"),
    ],
)
def test_repeated_keys_and_non_finite_numbers_get_a_safe_path(
    edit: Any, code: str, path: str, declared: str | None
) -> None:
    """Issue 17: json.duplicate_key and json.non_finite gave no path. Both gate paths give
    the schema-rendered path (undeclared keys as ``*``) and agree."""
    line = edit(json.dumps(EXAMPLE)).encode()
    reasons = GATE.gate_line(line, declared).reasons
    assert [(r.code, r.path) for r in reasons] == [(code, path)]
    assert "secret" not in reasons[0].detail
    batch = GATE.gate_batch(LineBatch(first_line=1, offsets=[0], lines=[line]), declared)
    assert batch.rejected is not None
    assert batch.rejected.column("_reasons").to_pylist()[0][0]["path"] == path


def test_a_line_routed_to_no_kind_gets_every_key_as_a_star() -> None:
    assert GATE.gate_line(b'{"a":[1,{"b":NaN}]}').reasons[0].path == "$.*[1].*"


@pytest.mark.parametrize("declared", [None, "math-reasoning-v1"])
def test_a_top_level_arrays_indices_stay_indices(declared: str | None) -> None:
    """Under a declared kind's object schema, a top-level array's index was rendered as
    an undeclared key: ``$.*`` for ``$[1]`` (found by the gate red team)."""
    assert GATE.gate_line(b"[1,NaN]", declared).reasons[0].path == "$[1]"
    assert GATE.gate_line(b'[{"c":1,"c":2}]', declared).reasons[0].path == "$[0].*"


def test_with_sanitization_the_gate_stages_each_rows_submission_as_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the replay rule compares with sanitization on, a row per staged row in their
    order: the key's digest is the lineage's (HMAC under the campaign key: a task id may
    be a short PII value, which a plain hash gives away to a guess), the body's that of
    the record before redaction (the stored record's digest where nothing was redacted).
    Without sanitization nothing is staged beside the rows."""
    import hashlib
    import hmac

    from pipeline.records.canonical import canonical_json

    key = "f00dfeedc0ffee0123456789abcdef0123456789abcdef"
    monkeypatch.setenv("ROWGATE_TEST_LINEAGE_KEY", key)
    rng = random.Random(3)
    rows = [make_record("agent-trace-v1", rng, i) for i in range(3)]
    rows[1]["task_id"] = "leak.one@gmail.com"
    rows[2]["final_answer"] = "Write to leak.two@gmail.com."
    batch = LineBatch(1, list(range(3)), [orjson.dumps(r) for r in rows])
    config = CampaignConfig().override(
        **{"sanitize.enabled": True, "lineage.key_env": "ROWGATE_TEST_LINEAGE_KEY"}
    )
    gated = Gate(config).gate_batch(batch, "agent-trace-v1")
    stored = gated.kinds["agent-trace-v1"].to_pydict()
    submitted = gated.submitted["agent-trace-v1"].to_pydict()
    assert submitted["_shard_line"] == stored["_shard_line"] == [1, 2, 3]
    assert stored["task_id"][1] == "[REDACTED_PII:EMAIL]"
    assert submitted["_submission_key"] == [
        hmac.new(key.encode(), canonical_json([r["task_id"]]), hashlib.sha256).digest()
        for r in rows
    ]
    assert submitted["_submission_body"] == [
        hashlib.sha256(canonical_json(r)).digest() for r in rows
    ]
    assert stored["_record_sha256"][0] == submitted["_submission_body"][0].hex()
    assert stored["_record_sha256"][2] != submitted["_submission_body"][2].hex()  # redacted
    plain = Gate(CampaignConfig()).gate_batch(batch, "agent-trace-v1")
    assert plain.submitted == {}


def _integers_as_floats(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: _integers_as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers_as_floats(v) for v in value]
    return value


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_integers_written_as_floats_gate_as_the_integers(kind: str) -> None:
    """JSON Schema's ``integer`` admits ``60.0``: a record whose integers are written so
    gates as the same record written with integers (its disposition, reasons and
    digests), on both paths, with the bundled campaign's reference tables. A rule that
    sliced a text with them (a grounded-QA citation's span, an AutoQA quote's offsets)
    was an internal error: the run failed with exit 4. ARI's digest is over the envelope
    as written (the upstream tool's ``json.dumps``), so it is recomputed for the floats."""
    from pipeline.core.config import load_campaign
    from pipeline.kinds import KINDS
    from pipeline.kinds.ari import rubric_sha256
    from tests.conftest import DATA

    gate = Gate(load_campaign(DATA / "campaign.toml"))
    for i in range(12):
        record = make_record(kind, random.Random(i), i)
        floated = _integers_as_floats(record)
        excludes = getattr(KINDS[kind], "digest_excludes", None)
        if excludes is not None:
            floated["rubric_sha256"] = rubric_sha256(floated, excludes)
        line, written = orjson.dumps(record), orjson.dumps(floated)
        assert written != line
        expected = gate.gate_line(line, kind)
        for got in (
            gate.gate_line(written, kind),
            gate.gate_batch(LineBatch(1, [0], [written]), kind),
        ):
            if not isinstance(got, GateOutcome):  # the batch path: its one row
                batch = got.kinds.get(kind) or got.rejected
                assert batch is not None
                row = batch.to_pylist()[0]
                got = GateOutcome(
                    Disposition(row.get("_disposition", "rejected")),
                    tuple(Reason(**r) for r in row["_reasons"]),
                    row["_raw_sha256"],
                    record_sha256=row["_record_sha256"],
                    content_sha256=row["_content_sha256"],
                )
            assert got.disposition == expected.disposition, (i, got.reasons)
            assert [(r.code, r.path) for r in got.reasons] == [
                (r.code, r.path) for r in expected.reasons
            ]
            if excludes is None:  # an ARI envelope's digest field differs: another record
                assert got.record_sha256 == expected.record_sha256
                assert got.content_sha256 == expected.content_sha256
