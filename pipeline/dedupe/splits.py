"""Groups that straddle splits: a task or a ``meta`` group with rows in two splits.

Seed 004: ``meta`` is producer metadata that "consumers may group by … but never train
on"; a prompt group or task split across train and eval leaks even when no single row is
duplicated. Such groups are reported, not removed: every row of a straddling group gets the
reason ``dedupe.split_group`` (its disposition is unchanged) and the groups are listed in a
table, because which side should give way is a curation decision, not a rule.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import polars as pl

from pipeline.core.config import ConfigError
from pipeline.core.reasons import DEDUPE_SPLIT_GROUP

__all__ = ["SplitGroups", "field_expr", "straddling_groups"]


def field_expr(path: str, schema: pl.Schema) -> pl.Expr | None:
    """A dotted field path as a string expression: struct fields are followed, a JSON-text
    column (``meta``) is read with a JSON path, a whole struct is its JSON text (a null
    inside it failed the cast to text: an internal error, exit 4). ``None`` when the
    column is absent; a :class:`ConfigError` when the path reads a list (no text stands
    for a group: polars failed inside the run, an internal error, exit 4)."""
    root, *rest = path.split(".")
    if root not in schema:
        return None
    expr = pl.col(root)
    dtype: Any = schema[root]
    for i, name in enumerate([*rest, None]):
        if isinstance(dtype, pl.List | pl.Array):
            raise ConfigError(
                f"dedupe.split_groups: {path!r} reads a list ({'.'.join([root, *rest[:i]])}); "
                "name a text, number or struct field"
            )
        if name is None:
            break
        if isinstance(dtype, pl.Struct):
            expr = expr.struct.field(name)
            dtype = {f.name: f.dtype for f in dtype.fields}.get(name, pl.Null())
        else:
            return _json_value(expr.cast(pl.String), rest[i:])
    if isinstance(dtype, pl.Struct):  # its JSON text (a cast fails on a null inside)
        return _struct_text(expr, dtype)
    return expr.cast(pl.String)


#: an object's member name, with its colon (the JSON path match writes objects compactly)
_MEMBER_NAME: Final = r'"(?:[^"\\]|\\.)*"\s*:'


def _json_value(text: pl.Expr, path: Sequence[str]) -> pl.Expr:
    """The value at ``path`` in JSON ``text`` as a group's value, as a struct column's
    would be: a string is its content, a number, boolean or list its JSON text; an
    object its JSON text where it holds a value below it, and none where it holds only
    nulls and objects holding none (``{}``, ``{"a": {}}``), as :func:`_struct_text`.
    The path match gives an object and a string the same text (``{}`` for both), so a
    string is told by a filter that only a string passes (every string is ``>= ""``)."""
    match = "$" + "".join(_member(name) for name in path)
    value = text.str.json_path_match(match)
    # only a text holding an object inside it is matched again (the others are null
    # here: matched and tested in every row, a field cost ~5 times the one match)
    nested = pl.when(text.str.count_matches("{", literal=True) > 1).then(text)
    parent = "$" + "".join(_member(name) for name in path[:-1])
    string = nested.str.json_path_match(f'{parent}[?(@{_member(path[-1])} >= "")]').is_not_null()
    again = nested.str.json_path_match(match)
    # an object holds no value when, its members' names gone, only braces, commas and
    # nulls are left: a string, number, boolean or list leaves something
    left = again.str.replace_all(_MEMBER_NAME, "").str.replace_all(r"null|[\s{},]", "")
    holds_nothing = (again.str.starts_with("{") & (left.str.len_bytes() == 0)).fill_null(False)
    return pl.when(string | ~holds_nothing).then(value)


def _member(name: str) -> str:
    """``name`` as a JSON path member, bracketed and quoted (a name holding a space read
    as ``$.a b`` matched nothing: no group). The path's filters take no escapes, so a
    name holding both quotes or a backslash is refused."""
    quote = "'" if "'" not in name else '"'
    if quote in name or "\\" in name:
        raise ConfigError(
            f"dedupe.split_groups: the member {name!r} cannot be read from JSON text "
            "(it holds both quotes or a backslash)"
        )
    return f"[{quote}{name}{quote}]"


def _struct_text(expr: pl.Expr, dtype: pl.Struct) -> pl.Expr:
    """A whole struct as a group's value: its JSON text, bytes inside it as hex (polars
    cannot write bytes as JSON: a Rust panic). A struct that holds no value below it (a
    writer's ``{}``, or ``{"a": {}}``: every field null, or a struct holding none) is no
    value, as a null one is: it names no group."""
    if not dtype.fields:
        return pl.lit(None, pl.String)
    return pl.when(_holds_value(expr, dtype)).then(_json_ready(expr, dtype).struct.json_encode())


def _holds_value(expr: pl.Expr, dtype: Any) -> pl.Expr:
    """Whether ``expr`` holds a value: not null, and for a struct, a field that holds
    one (a list holds one, empty or not)."""
    if not isinstance(dtype, pl.Struct):
        return expr.is_not_null()
    if not dtype.fields:
        return pl.lit(False)
    return pl.any_horizontal(_holds_value(expr.struct.field(f.name), f.dtype) for f in dtype.fields)


def _json_ready(expr: pl.Expr, dtype: Any) -> pl.Expr:
    """``expr`` with every binary value inside it (struct fields, list items) as its hex
    text; unchanged where it holds none."""
    if isinstance(dtype, pl.Binary):
        return expr.bin.encode("hex")
    if not _holds_binary(dtype):
        return expr
    if isinstance(dtype, pl.Struct):
        rebuilt = pl.struct(
            _json_ready(expr.struct.field(f.name), f.dtype).alias(f.name) for f in dtype.fields
        )
        return pl.when(expr.is_not_null()).then(rebuilt)
    if isinstance(dtype, pl.Array):
        return _json_ready(expr.arr.to_list(), pl.List(dtype.inner))
    return expr.list.eval(_json_ready(pl.element(), dtype.inner))  # a list


def _holds_binary(dtype: Any) -> bool:
    if isinstance(dtype, pl.Binary):
        return True
    if isinstance(dtype, pl.Struct):
        return any(_holds_binary(f.dtype) for f in dtype.fields)
    if isinstance(dtype, pl.List | pl.Array):
        return _holds_binary(dtype.inner)
    return False


@dataclass(frozen=True)
class SplitGroups:
    """The groups (a value of a field) whose rows are in more than one split, and those
    rows. ``groups``: ``field``, ``value`` and ``splits`` (sorted), a row per group, in
    the order their first rows come (then by field); ``members``: ``_row`` and
    ``_group`` (its place in ``groups``), a row per row and field of a straddling group,
    by row, then field. Each group's splits are held once, not beside each of its rows:
    a row held its group's field, value and splits (and a join's copies) where most rows
    straddle, ~530 bytes a row at the peak."""

    groups: pl.DataFrame
    members: pl.DataFrame

    @classmethod
    def none(cls) -> SplitGroups:
        return cls(
            pl.DataFrame(schema=_GROUPS),
            pl.DataFrame(schema={"_row": pl.Int64, "_group": pl.UInt32}),
        )

    def table(self) -> pl.DataFrame:
        """The groups as the split-groups table lists them (a field's value once)."""
        return self.groups.unique(["field", "value"], maintain_order=True)

    def flagged(self, rows: int) -> Iterator[pl.DataFrame]:
        """The rows of straddling groups with their reasons (``_row``, ``_reasons``: a
        ``dedupe.split_group`` reason per field, naming the group's splits), about
        ``rows`` rows at a time (a row's reasons never cut); one empty frame where no
        row straddles."""
        reasons = self.groups.select(
            _reason=pl.struct(
                code=pl.lit(DEDUPE_SPLIT_GROUP),
                path=pl.lit("$.") + pl.col("field"),
                detail=pl.lit("group shared by splits ") + pl.col("splits").list.join(", "),
            )
        ).with_row_index("_group")
        at = self.members["_row"].to_numpy()
        lo = 0
        while True:
            hi = min(lo + rows, len(at))
            while hi < len(at) and at[hi] == at[hi - 1]:  # a row's reasons stay together
                hi += 1
            part = self.members.slice(lo, hi - lo)
            yield (
                part.join(reasons, on="_group", how="left", maintain_order="left")
                .group_by("_row", maintain_order=True)
                .agg(_reasons=pl.col("_reason"))
            )
            if hi == len(at):
                return
            lo = hi


_GROUPS: Final = pl.Schema(
    [("field", pl.String()), ("value", pl.String()), ("splits", pl.List(pl.String()))]
)


def straddling_groups(frame: pl.DataFrame, fields: Sequence[str]) -> SplitGroups:
    """The groups of ``frame``'s rows (with ``_row`` and ``_split``) whose value of one of
    ``fields`` occurs in more than one split, and the rows in them."""
    labelled = frame.filter(pl.col("_split").is_not_null())
    if labelled["_split"].n_unique() < 2:
        return SplitGroups.none()
    groups, members = [pl.DataFrame(schema=_GROUPS)], []
    names = sorted(fields)
    found = 0
    for path in fields:
        expr = field_expr(path, labelled.schema)
        if expr is None:
            continue
        values = labelled.select("_row", "_split", value=expr).filter(pl.col("value").is_not_null())
        straddling = (
            values.group_by("value")
            .agg(splits=pl.col("_split").unique().sort())
            .filter(pl.col("splits").list.len() > 1)
            .with_row_index("_group", offset=found)
        )
        members.append(
            values.join(straddling.select("value", "_group"), on="value").select(
                "_row", "_group", _field=pl.lit(names.index(path), pl.UInt16)
            )
        )
        groups.append(straddling.select(field=pl.lit(path), value="value", splits="splits"))
        found += straddling.height
    if not members:
        return SplitGroups.none()
    rows = pl.concat(members).sort("_row", "_field").drop("_field")
    # the groups in the order their first rows come, and the rows' groups renumbered so
    order = rows["_group"].unique(maintain_order=True).to_numpy()
    number = np.empty(found, np.uint32)
    number[order] = np.arange(len(order), dtype=np.uint32)
    rows = rows.with_columns(_group=pl.Series(number[rows["_group"].to_numpy()]))
    table = pl.concat(groups)[order]
    return SplitGroups(table, rows.with_columns(pl.col("_row").cast(pl.Int64)))
