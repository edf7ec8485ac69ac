"""Groups that straddle splits (:func:`pipeline.dedupe.splits.straddling_groups`): held
as a table of groups and the rows in them, the same groups, table and reasons as the
form it replaced, where each row carried its group's field, value and splits (kept
here as the reference)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.config import ConfigError
from pipeline.core.reasons import DEDUPE_SPLIT_GROUP
from pipeline.dedupe.splits import field_expr, straddling_groups

FIELDS = ("task_id", "meta.group", "meta.task")


def _reference(frame: pl.DataFrame, fields: Sequence[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The split-groups table and every flagged row's reasons, as a row per row and
    field of a straddling group computed them."""
    labelled = frame.filter(pl.col("_split").is_not_null())
    schema = {"_row": pl.Int64, "field": pl.String, "value": pl.String}
    found = [pl.DataFrame(schema={**schema, "splits": pl.List(pl.String)})]
    if labelled["_split"].n_unique() >= 2:
        for path in fields:
            expr = field_expr(path, labelled.schema)
            if expr is None:
                continue
            values = labelled.select("_row", "_split", value=expr).filter(
                pl.col("value").is_not_null()
            )
            groups = (
                values.group_by("value")
                .agg(splits=pl.col("_split").unique().sort())
                .filter(pl.col("splits").list.len() > 1)
            )
            found.append(
                values.join(groups, on="value").select(
                    "_row", field=pl.lit(path), value="value", splits="splits"
                )
            )
    rows = pl.concat(found).sort("_row", "field")
    flagged = (
        rows.with_columns(
            _reason=pl.struct(
                code=pl.lit(DEDUPE_SPLIT_GROUP),
                path=pl.lit("$.") + pl.col("field"),
                detail=pl.lit("group shared by splits ") + pl.col("splits").list.join(", "),
            )
        )
        .group_by("_row", maintain_order=True)
        .agg(_reasons=pl.col("_reason"))
    )
    return rows.drop("_row").unique(["field", "value"], maintain_order=True), flagged


rows = st.lists(
    st.tuples(
        st.sampled_from([None, "train", "eval", "test"]),
        st.sampled_from([None, "t1", "t2", "t3", "t4"]),
        st.sampled_from([None, "g1", "g2"]),
        st.sampled_from([None, "t1", "x"]),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(rows, st.integers(1, 7), st.permutations(FIELDS))
def test_groups_table_and_reasons_are_those_of_a_row_per_group_member(
    given_rows: list[tuple[str | None, ...]], part: int, fields: list[str]
) -> None:
    """Random rows of three splits (and none), nulls, a value shared by two fields,
    fields in any order, reasons taken ``part`` rows at a time: the same table, in
    the same order, and the same rows with the same reasons in order."""
    frame = pl.DataFrame(
        {
            "_row": list(range(0, 3 * len(given_rows), 3)),  # ids need not be dense
            "_split": [r[0] for r in given_rows],
            "task_id": [r[1] for r in given_rows],
            "meta": [{"group": r[2], "task": r[3]} for r in given_rows],
        },
        schema={
            "_row": pl.Int64,
            "_split": pl.String,
            "task_id": pl.String,
            "meta": pl.Struct({"group": pl.String, "task": pl.String}),
        },
    )
    found = straddling_groups(frame, fields)
    table, flagged = _reference(frame, fields)
    assert found.table().equals(table)
    assert pl.concat(list(found.flagged(part))).equals(flagged)
    assert all(f.height <= part or f.height == 1 for f in found.flagged(part))


def test_no_row_straddles_gives_one_empty_part() -> None:
    frame = pl.DataFrame({"_row": [0, 1], "_split": ["train", "train"], "task_id": ["a", "a"]})
    found = straddling_groups(frame, ["task_id"])
    parts = list(found.flagged(10))
    assert len(parts) == 1
    assert parts[0].height == 0
    assert found.table().height == 0


def test_a_json_text_field_holding_no_value_names_no_group() -> None:
    """A field read from JSON text (pw-decide-row's ``meta`` in a run) names a group where
    the same value in a struct column would: an object holding only nulls and empty
    objects names none, a string names its content (``"{}"`` too, which the path match
    gives the text of ``{}``), a number, boolean, list or object holding a value its
    JSON text. Names and strings holding quotes, colons and braces are read as such."""
    cases: list[tuple[object, str | None]] = [
        ({}, None),
        ({"a": {}}, None),
        ({"a": None}, None),
        ({"a": {"b": None, "c": {}}}, None),
        ({'k":{': {}}, None),
        ("{}", "{}"),
        ("", ""),
        ("null", "null"),
        ({"a": []}, '{"a":[]}'),
        ({"a": 'y:":{}'}, '{"a":"y:\\":{}"}'),
        ({"a": {"b": 0}}, '{"a":{"b":0}}'),
        ([], "[]"),
        (5, "5"),
        (False, "false"),
        (None, None),
    ]
    frame = pl.DataFrame({"meta": [orjson.dumps({"group": v}).decode() for v, _ in cases]})
    found = frame.select(v=field_expr("meta.group", frame.schema))["v"].to_list()
    assert found == [expected for _, expected in cases]
    # a member path below: the same rules, and a parent that is no object holds none
    nested = pl.DataFrame(
        {"meta": ['{"a":{"b":{}}}', '{"a":{"b":"{}"}}', '{"a":[{"b":"x"}]}', '{"a":"s"}']}
    )
    assert nested.select(v=field_expr("meta.a.b", nested.schema))["v"].to_list() == [
        None,
        "{}",
        None,
        None,
    ]
    # any member name a config can give but one holding both quotes or a backslash
    for name in ("a b", "my-group", "it's", 'say "x"', "ü"):
        named = pl.DataFrame({"meta": [orjson.dumps({name: v}).decode() for v in ("{}", {}, 7)]})
        found = named.select(v=field_expr(f"meta.{name}", named.schema))["v"].to_list()
        assert found == ["{}", None, "7"], name
    for name in ("both'\"", "back\\slash"):
        with pytest.raises(ConfigError, match="cannot be read from JSON text"):
            field_expr(f"meta.{name}", frame.schema)
    # the objects that name no group name none as a struct column's values either
    layout = pl.Struct({"group": pl.Struct({"a": pl.Struct({"b": pl.Int64})})})
    structs = pl.DataFrame({"meta": [{"group": {}}, {"group": {"a": {}}}]}, schema={"meta": layout})
    assert structs.select(v=field_expr("meta.group", structs.schema))["v"].to_list() == [None, None]
