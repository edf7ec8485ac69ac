"""Record values never leak: reasons, paths, raw bytes of rejected lines, and the outputs.

Unit tests of each rule first; the last test plants secrets in every field type and
encoding, runs the CLI, and greps every output for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.schemas import SchemaRegistry, instance_parts

FIXTURES = Path(__file__).parent / "fixtures"


def _decide_row() -> dict[str, Any]:
    record: dict[str, Any] = json.loads((FIXTURES / "pw_decide_row.json").read_text("utf-8"))
    return record


# -- paths: a map key is one `*` whatever it holds ---------------------------------------


@pytest.mark.parametrize(
    "key", ["a.b.c", "guide.with.dots", "a[0]", "x]y", "", "a..b", "[1].b", "."]
)
def test_a_map_key_is_one_star_whatever_it_holds(key: str) -> None:
    # Issue 15 item 17: fastjsonschema splits its error path on '.', '[' and ']', so a map
    # key "a.b.c" under labels.guides gave "$.labels.guides.*.*.*" (the key's shape).
    entry = SchemaRegistry().get("pw-decide-row-1")
    record = _decide_row()
    record["labels"]["guides"] = {key: "not a boolean"}
    record["labels"]["requests"][0]["scores"] = {key: 7}
    paths = {(r.code, r.path) for r in entry.errors(record)}
    assert ("schema.type", "$.labels.guides.*") in paths
    assert ("schema.maximum", "$.labels.requests[0].scores.*") in paths


def test_instance_parts_reads_the_error_name_against_the_record() -> None:
    record = {"m": {"a": {"b": 1}, "a.b": {"c": [0, {"d.e": 2}]}}}
    assert instance_parts(record, "data.m.a.b.c[1].d.e") == ["m", "a.b", "c", 1, "d.e"]
    assert instance_parts(record, "data.m.a.b") == ["m", "a", "b"]
    assert instance_parts(record, "data") == []
    # A name the record cannot resolve stops at the deepest resolved container.
    assert instance_parts(record, "data.m.zz.y") == ["m"]
