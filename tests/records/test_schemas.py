"""Schema registry: the JSON-Schema-Test-Suite subset, refusals, pins, safe errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import quote

import fastjsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.records.schemas import (
    SchemaError,
    SchemaRegistry,
    compile_schema,
    lint_schema,
    number_paths,
    resolve_ref,
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


def test_a_schema_file_is_compiled_once_per_process_and_again_when_it_changes(
    tmp_path: Path,
) -> None:
    """Every run's preflight loads every schema: the compiled validator is shared by
    registries reading the same bytes, and a changed file is compiled anew."""
    path = tmp_path / "item.schema.json"
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": False,
    }
    path.write_text(json.dumps(schema))
    first, again = SchemaRegistry(tmp_path).get("item"), SchemaRegistry(tmp_path).get("item")
    assert again.validate is first.validate
    assert again.schema == first.schema
    assert again.schema is not first.schema
    first.validate({"a": 1})
    path.write_text(json.dumps(schema | {"properties": {"a": {"type": "string"}}}))
    changed = SchemaRegistry(tmp_path).get("item")
    assert changed.validate is not first.validate
    assert changed.sha256 != first.sha256
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        changed.validate({"a": 1})
    first.validate({"a": 1})  # the first file's validator is unchanged


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


_POINTER_DOC: dict[str, object] = {
    "$defs": {"a/b": {"type": "string"}, "m~n": {"type": "integer"}, "~1": {"const": 1}},
    "allOf": [{"type": "object"}, {"required": ["x"]}],
    "properties": {"a b": {"type": "null"}},
}


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("#", _POINTER_DOC),
        ("#/$defs/a~1b", {"type": "string"}),
        ("#/$defs/m~0n", {"type": "integer"}),
        # ~01 is "~" then "1" (~0 is decoded last), never "/"
        ("#/$defs/~01", {"const": 1}),
        ("#/allOf/1", {"required": ["x"]}),
        # a URI fragment is percent-encoded (RFC 6901 §6), as fastjsonschema reads it
        ("#/properties/a%20b", {"type": "null"}),
    ],
)
def test_resolve_ref_reads_rfc_6901_pointers(ref: str, expected: object) -> None:
    assert resolve_ref(ref, _POINTER_DOC) == expected


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("#/$defs/a/b", "nothing at 'a'"),
        ("#/$defs/missing", "nothing at 'missing'"),
        ("#/allOf/2", "nothing at '2'"),
        ("#/allOf/-1", "nothing at '-1'"),
        ("#/allOf/01", "nothing at '01'"),
        ("#/$defs/a~1b/type/x", "nothing at 'x'"),
        ("#anchor", "not a local JSON Pointer"),
        ("other.json#/$defs/a~1b", "not a local JSON Pointer"),
    ],
)
def test_resolve_ref_refuses_a_missing_target(ref: str, needle: str) -> None:
    with pytest.raises(SchemaError, match=needle):
        resolve_ref(ref, _POINTER_DOC)


@given(st.lists(st.text(max_size=8), min_size=1, max_size=4))
def test_resolve_ref_finds_any_member_name(names: list[str]) -> None:
    """Every member name, escaped as RFC 6901 says, names its member: the one resolver
    every ``$ref`` reader uses (registry bounds, Arrow layout, sanitize paths)."""
    root: dict[str, object] = {"leaf": True}
    for name in reversed(names):
        root = {name: root}
    tokens = [quote(n.replace("~", "~0").replace("/", "~1"), safe="") for n in names]
    assert resolve_ref("#/" + "/".join(tokens), root) == {"leaf": True}


def test_a_percent_encoded_ref_is_read_as_the_validator_reads_it() -> None:
    """The registry's bounds read ``#/$defs/a%20b`` as the member ``a%20b``, which
    fastjsonschema (percent-decoding it) does not need: loading raised KeyError."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"n": {"$ref": "#/$defs/a%20b"}},
        "$defs": {"a b": {"type": "integer", "minimum": 0, "maximum": 9}},
    }
    assert compile_schema(schema)({"n": 3}) == {"n": 3}
    assert static_bounds(schema) == (1, 1)
    assert number_paths(schema) == frozenset({("n",)})


# -- the 2020-12 metaschema (seed 000: "validate the schema itself") --------------------


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "string", "minLength": -1}}},
            "/properties/a/minLength",
        ),
        ({"type": "strng"}, "/type"),
        ({"minLength": -1}, "/minLength"),
        ({"$defs": {"x": {"items": {"type": 1}}}}, "/$defs/x/items/type"),
        ({"allOf": [{"maxItems": 1.5}]}, "/allOf/0/maxItems"),
        ({"properties": {"a/b": {"required": ["x", "x"]}}}, "/properties/a~1b/required"),
    ],
)
def test_a_schema_breaking_the_metaschema_is_refused_naming_file_and_pointer(
    tmp_path: Path, schema: dict[str, object], pointer: str
) -> None:
    (tmp_path / "bad.schema.json").write_text(json.dumps(schema))
    with pytest.raises(SchemaError) as caught:
        SchemaRegistry(tmp_path).get("bad")
    message = str(caught.value)
    assert str(tmp_path / "bad.schema.json") in message
    assert f"\n  {pointer}: " in message, message


def test_the_metaschema_agrees_with_the_suite(conformance: Path) -> None:
    """The suite's own metaschema cases, and every schema of the suite is a valid one."""
    from pipeline.records.metaschema import DIALECT
    from pipeline.records.schemas import metaschema_problems

    cases = schemas = 0
    for path in sorted((conformance / "json-schema-2020-12").glob("*.json")):
        for group in json.loads(path.read_text("utf-8")):
            assert metaschema_problems(group["schema"]) == [], (path.name, group["description"])
            schemas += 1
            if isinstance(group["schema"], dict) and group["schema"].get("$ref") == DIALECT:
                for case in group["tests"]:
                    valid = not metaschema_problems(case["data"])
                    assert valid == case["valid"], (path.name, case["description"])
                    cases += 1
    assert cases >= 4
    assert schemas > 300


def test_every_bundled_schema_passes_the_metaschema() -> None:
    from pipeline.kinds import KINDS
    from pipeline.records.schemas import metaschema_problems
    from pipeline.rubrics.model import FORMAT_SCHEMA, RUBRIC_DIR

    root = Path(__file__).resolve().parents[2]
    files = [*sorted((root / "schemas").glob("*.schema.json")), RUBRIC_DIR / FORMAT_SCHEMA]
    assert len(files) == len(KINDS) + 1  # one schema per registered kind + the rubric format
    for path in files:
        assert metaschema_problems(json.loads(path.read_text("utf-8"))) == [], path


def test_the_rubric_format_schema_is_checked_too(tmp_path: Path) -> None:
    from pipeline.rubrics.model import FORMAT_SCHEMA, RUBRIC_DIR, RubricError, RubricRegistry

    format_schema = json.loads((RUBRIC_DIR / FORMAT_SCHEMA).read_text("utf-8"))
    format_schema["properties"]["rubric_version"]["maxLength"] = -1
    (tmp_path / FORMAT_SCHEMA).write_text(json.dumps(format_schema))
    (tmp_path / "code-review-v1.json").write_bytes(
        (RUBRIC_DIR / "code-review-v1.json").read_bytes()
    )
    with pytest.raises(RubricError, match=r"/properties/rubric_version/maxLength: breaks"):
        RubricRegistry(tmp_path).get("code-review-v1")


def test_the_metaschema_ships_in_the_package() -> None:
    """Every metaschema file is package data (a wheel checks schemas without a network)."""
    import tomllib
    from fnmatch import fnmatch

    from pipeline.records.metaschema import METASCHEMA_DIR

    root = Path(__file__).resolve().parents[2]
    setuptools = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    patterns = setuptools["package-data"]["pipeline"]
    shipped = [p.relative_to(root / "pipeline").as_posix() for p in METASCHEMA_DIR.rglob("*")]
    assert len([s for s in shipped if s.endswith(".json")]) == 8
    assert "records/metaschema-2020-12/LICENSE" in shipped
    for name in shipped:
        if (root / "pipeline" / name).is_file():
            assert any(fnmatch(name, p) for p in patterns), name


def test_the_every_error_validator_is_compiled_on_the_first_invalid_record() -> None:
    """Loading a schema compiles the fast validator only; the one that reports every
    error is compiled when a record first fails, then kept (it was compiled at load,
    half of start-up's schema work in the parent and every worker)."""
    from pipeline.records.schemas import SCHEMA_DIR, load_schema

    entry = load_schema(SCHEMA_DIR / "math-reasoning-v1.schema.json", "math-reasoning-v1")
    assert "_validate_all" not in vars(entry)
    reasons = entry.errors({"problem": 1})
    assert {r.code for r in reasons} >= {"schema.required", "schema.type"}
    compiled = vars(entry)["_validate_all"]
    assert entry.errors({"problem": 1}) == reasons
    assert vars(entry)["_validate_all"] is compiled
