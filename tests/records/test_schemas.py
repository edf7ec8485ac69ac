"""Schema registry: the JSON-Schema-Test-Suite subset, refusals, pins, safe errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.records.schemas import (
    SchemaError,
    SchemaRegistry,
    compile_schema,
    lint_schema,
    number_paths,
    static_bounds,
)
from pipeline.records.strict_json import measure
from tests.strategies import from_schema

SUITE_KEYWORDS_REFUSED = {
    "unevaluatedProperties",
    "unevaluatedItems",
    "prefixItems",
    "dependentRequired",
    "dependentSchemas",
    "$dynamicRef",
    "minContains",
    "maxContains",
}


def test_json_schema_test_suite_subset(conformance: Path) -> None:
    """Every case whose schema uses only allowlisted keywords passes; others are refused."""
    passed = refused = 0
    seen_refused: set[str] = set()
    for path in sorted((conformance / "json-schema-2020-12").glob("*.json")):
        for group in json.loads(path.read_text("utf-8")):
            problems = lint_schema(group["schema"])
            if problems:
                refused += 1
                seen_refused |= {
                    kw for kw in SUITE_KEYWORDS_REFUSED if any(repr(kw) in p for p in problems)
                }
                continue
            validate = compile_schema(group["schema"])
            for case in group["tests"]:
                try:
                    validate(case["data"])
                    valid = True
                except Exception:
                    valid = False
                assert valid == case["valid"], (
                    path.name,
                    group["description"],
                    case["description"],
                )
                passed += 1
    assert passed > 700
    assert refused > 100
    assert seen_refused == SUITE_KEYWORDS_REFUSED


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        ({"unevaluatedProperties": False}, "'unevaluatedProperties' is not enforced"),
        ({"prefixItems": [{"type": "string"}]}, "'prefixItems' is not enforced"),
        (
            {"properties": {"a": {"dependentRequired": {"a": ["b"]}}}},
            "/properties/a: keyword 'dependentRequired'",
        ),
        ({"items": [{"type": "string"}]}, "array form"),
        ({"$ref": "https://example.com/s.json"}, "only local references"),
        ({"pattern": "^\\d+$"}, "explicit class"),
        ({"$schema": "http://json-schema.org/draft-07/schema#"}, "only the Draft 2020-12 dialect"),
        ({"$defs": {"x": {"$id": "x"}}}, "only allowed at the root"),
    ],
)
def test_lint_refuses_with_a_clear_message(schema: dict[str, object], needle: str) -> None:
    problems = lint_schema(schema)
    assert any(needle in p for p in problems), problems


def test_registry_refuses_a_schema_file(tmp_path: Path) -> None:
    (tmp_path / "bad.schema.json").write_text('{"type":"object","unevaluatedProperties":false}')
    with pytest.raises(SchemaError, match="unevaluatedProperties"):
        SchemaRegistry(tmp_path).get("bad")


def test_schema_files_are_parsed_strictly(tmp_path: Path) -> None:
    (tmp_path / "dup.schema.json").write_text('{"type":"object","type":"array"}')
    with pytest.raises(SchemaError, match=r"json\.duplicate_key"):
        SchemaRegistry(tmp_path).get("dup")


def test_ref_siblings_apply_as_in_2020_12() -> None:
    validate = compile_schema(
        {
            "properties": {"a": {"$ref": "#/$defs/s", "maxLength": 2}},
            "$defs": {"s": {"type": "string"}},
        }
    )
    validate({"a": "ab"})
    with pytest.raises(Exception, match=r"maxLength|shorter"):
        validate({"a": "abc"})


def test_format_is_an_annotation() -> None:
    compile_schema({"format": "date-time"})("not a date")


def test_no_defaults_are_injected() -> None:
    record: dict[str, object] = {}
    compile_schema({"properties": {"a": {"default": 1}}})(record)
    assert record == {}


def test_remote_reference_is_never_fetched() -> None:
    with pytest.raises(Exception, match="remote schema reference refused"):
        compile_schema({"$ref": "https://example.invalid/schema.json"})


def test_shipped_schemas_load_with_stable_ids_and_digests() -> None:
    registry = SchemaRegistry()
    assert registry.ids() == [
        "agent-trace-v1",
        "ari-replication-rubric-3",
        "ari-replication-rubric-v2",
        "autoqa-eval-1",
        "grounded-qa-v1",
        "math-reasoning-v1",
        "pairwise-v2",
        "pw-decide-row-1",
    ]
    for schema_id in registry.ids():
        entry = registry.get(schema_id)
        assert entry.sha256 == hashlib.sha256(entry.path.read_bytes()).hexdigest()
    assert registry.get("pw-decide-row-1").title == "pw-decide-row/1"


def test_seed_000_example_is_valid() -> None:
    example = json.loads(
        (Path(__file__).resolve().parents[1] / "fixtures" / "seed000_annotation.json").read_text(
            "utf-8"
        )
    )
    assert SchemaRegistry().get("pairwise-v2").errors(example) == []


def test_pin_mismatch_is_a_hard_error() -> None:
    registry = SchemaRegistry(pins={"pairwise-v2": "0" * 64})
    with pytest.raises(SchemaError, match="does not match the pinned"):
        registry.get("pairwise-v2")


def test_errors_are_safe_paths_and_keywords_never_values() -> None:
    entry = SchemaRegistry().get("pairwise-v2")
    example = json.loads(
        (Path(__file__).resolve().parents[1] / "fixtures" / "seed000_annotation.json").read_text(
            "utf-8"
        )
    )
    secret = "sk-live-SECRETSECRETSECRET"
    bad = {
        **example,
        "task_id": secret + " !",
        "ratings": {**example["ratings"], "style": 9},
        secret: 1,
    }
    reasons = entry.errors(bad)
    codes = {(r.code, r.path) for r in reasons}
    assert ("schema.pattern", "$.task_id") in codes
    assert ("schema.maximum", "$.ratings.style") in codes
    assert ("schema.additionalProperties", "$") in codes
    assert all(secret not in f"{r.code}{r.path}{r.detail}" for r in reasons)


def test_map_keys_in_paths_are_masked() -> None:
    entry = SchemaRegistry().get("pw-decide-row-1")
    record = json.loads(
        (Path(__file__).resolve().parents[1] / "fixtures" / "pw_decide_row.json").read_text("utf-8")
    )
    record["labels"]["requests"][0]["scores"] = {"secret-tool-name": 7}
    (reason,) = entry.errors(record)
    assert (reason.code, reason.path) == ("schema.maximum", "$.labels.requests[0].scores.*")


@pytest.mark.slow
@settings(max_examples=60)
@given(st.data())
def test_static_bounds_hold_for_valid_records(data: st.DataObject) -> None:
    registry = SchemaRegistry()
    for schema_id in ("pairwise-v2", "agent-trace-v1", "grounded-qa-v1", "math-reasoning-v1"):
        entry = registry.get(schema_id)
        record = data.draw(from_schema(entry.schema).filter(lambda r, e=entry: not e.errors(r)))
        depth, items = measure(record)
        bound_depth, bound_items = static_bounds(entry.schema)
        assert depth <= bound_depth
        assert items <= bound_items


def test_static_bounds_are_infinite_for_open_shapes() -> None:
    assert static_bounds({"type": "object"}) == (float("inf"), float("inf"))
    assert static_bounds({"type": "array", "items": {"type": "string"}}) == (
        float("inf"),
        float("inf"),
    )
    assert static_bounds(
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {"type": "array", "maxItems": 3, "items": {"type": "integer"}}},
        }
    ) == (2, 3)


def _numbers_at(value: object, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Key paths of every number in ``value``; a number inside an array counts as ("[]",)."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in _numbers_at(v, (*path, k))}
    if isinstance(value, list):
        return {p for v in value for p in _numbers_at(v, (*path, "[]"))}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {path}
    return set()


@pytest.mark.slow
@settings(max_examples=60)
@given(st.data())
def test_number_paths_hold_every_number_of_valid_records(data: st.DataObject) -> None:
    registry = SchemaRegistry()
    for schema_id in ("pairwise-v2", "math-reasoning-v1"):
        entry = registry.get(schema_id)
        paths = number_paths(entry.schema)
        assert paths
        record = data.draw(from_schema(entry.schema).filter(lambda r, e=entry: not e.errors(r)))
        # integral floats pass "integer" in 2020-12: put one where the schema admits numbers
        if data.draw(st.booleans()):
            *parents, leaf = sorted(paths)[0]
            node = record
            for key in parents:
                node = node[key]
            node[leaf] = float(node[leaf])
        assert _numbers_at(record) <= paths


def test_number_paths_of_the_bundled_schemas() -> None:
    registry = SchemaRegistry()
    assert number_paths(registry.get("pairwise-v2").schema) == {
        ("ratings", name) for name in ("factuality", "reasoning", "instruction_adherence", "style")
    }
    assert number_paths(registry.get("math-reasoning-v1").schema) == {("reasoning_score",)}
    # latency_ms and top_k sit inside the steps array: not a fixed path
    assert number_paths(registry.get("agent-trace-v1").schema) is None


def test_number_paths_are_none_where_the_schema_leaves_it_open() -> None:
    closed = {"type": "object", "additionalProperties": False}
    assert number_paths({"type": "object"}) is None  # any member, any value
    assert number_paths({}) is None  # no type: anything
    assert number_paths({"type": "array", "items": {"type": "number"}}) is None
    assert number_paths({"type": "array"}) is None  # items of any type
    assert number_paths({**closed, "properties": {"a": {"enum": [[1]]}}}) is None
    recursive = {**closed, "properties": {"next": {"$ref": "#"}}}
    assert number_paths(recursive) is None
    numbers = {"type": "number"}
    assert number_paths({**closed, "patternProperties": {"^n": numbers}}) is None
    assert number_paths({"type": "object", "additionalProperties": numbers}) is None
    assert number_paths({"type": "object", "additionalProperties": True}) is None
    assert number_paths(True) is None
    # and exact where it is closed
    assert number_paths({"type": "array", "items": {"type": "string"}}) == set()
    assert number_paths({"type": "array", "maxItems": 0}) == set()
    assert number_paths({**closed, "properties": {"a": {"enum": ["x", 2]}}}) == {("a",)}
    assert number_paths({**closed, "properties": {"a": {"const": "x"}}}) == set()
    assert number_paths(
        {"$defs": {"n": {"type": "integer"}}, **closed, "properties": {"a": {"$ref": "#/$defs/n"}}}
    ) == {("a",)}
    assert number_paths(False) == set()
    nullable = {"type": ["object", "null"], "additionalProperties": False}
    assert number_paths(
        {**closed, "properties": {"o": {**nullable, "properties": {"n": numbers}}}}
    ) == {("o", "n")}
