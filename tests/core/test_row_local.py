"""An expression's value for a row read alone and beside other rows
(:mod:`pipeline.core.row_local`): the sample rows of every layout, and the probe that
tells an expression reading other rows from one reading its own row."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest

from pipeline.core.config import CampaignConfig
from pipeline.core.row_local import SAMPLE_ROWS, changes_beside_others, sample_rows
from pipeline.gate.gate import Gate
from pipeline.kinds import KINDS, get_kind

F = pl.col("ratings").struct.field("factuality")
S = pl.col("ratings").struct.field("style")


def _layout(kind: str) -> list[pa.Field]:
    return list(Gate(CampaignConfig()).kind_gate(get_kind(kind)).layout.fields)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_s_layout_has_sample_rows(kind: str) -> None:
    """Without them the probe is skipped for the kind's bindings: a layout type the
    sampler cannot make (a new kind's) would switch it off unnoticed."""
    rows = sample_rows(_layout(kind))
    assert rows is not None
    frame = pl.from_arrow(rows)
    assert isinstance(frame, pl.DataFrame)
    assert frame.height == SAMPLE_ROWS
    nulls = frame.select(pl.all_horizontal(pl.all().is_null()))[:, 0]
    assert nulls.arg_true().to_list() == [SAMPLE_ROWS // 2 - 1, SAMPLE_ROWS - 1]
    values = frame.filter(~nulls)  # the others hold values
    assert values.null_count().sum_horizontal().item() == 0


def test_sample_rows_repeat_values_so_window_partitions_hold_several_rows() -> None:
    frame = pl.from_arrow(sample_rows(_layout("pairwise-v2")))
    assert isinstance(frame, pl.DataFrame)
    assert frame["preference"].drop_nulls().n_unique() < SAMPLE_ROWS - 1
    assert frame["ratings"].struct.field("factuality").drop_nulls().n_unique() > 2


def test_sample_rows_of_other_types() -> None:
    """Types no bundled layout holds yet, and one it cannot make (then ``None``)."""
    fields = [
        pa.field("t", pa.timestamp("us")),
        pa.field("d", pa.date32()),
        pa.field("b", pa.large_binary()),
        pa.field("l", pa.large_list(pa.int8())),
        pa.field("n", pa.null()),
        pa.field("u", pa.uint16()),
    ]
    rows = sample_rows(fields)
    assert rows is not None
    assert rows.num_rows == SAMPLE_ROWS
    assert sample_rows([pa.field("x", pa.dictionary(pa.int8(), pa.string()))]) is None


@pytest.mark.parametrize(
    "expr",
    [
        F - F.mean(),
        F.max().over(pl.col("preference")),
        F.shift(1),
        F.fill_null(strategy="forward"),
        F.cum_sum(),
        F.rank(),
        F.first(),
        F.quantile(0.5),
        pl.len(),
        pl.int_range(pl.len()),
        F.is_duplicated(),
        pl.corr(F, S),
        F.sort(),
        F.reverse(),
        F.interpolate(),
    ],
    ids=str,
)
def test_an_expression_reading_other_rows_changes_beside_others(expr: pl.Expr) -> None:
    rows = sample_rows(_layout("pairwise-v2"))
    assert rows is not None
    assert changes_beside_others(expr, rows) is not None


@pytest.mark.parametrize(
    "expr",
    [
        (F + S) / 3,  # a quotient by a constant: polars' reciprocal beside others
        F.fill_null(0),
        pl.when(pl.col("rationale").str.len_chars() > 1).then(F).otherwise(S),
        pl.col("messages").list.len(),
        pl.col("messages").list.unique().list.len(),
        pl.lit(1.5),
        pl.col("preference").str.to_uppercase(),
    ],
    ids=str,
)
def test_an_expression_reading_its_own_row_does_not(expr: pl.Expr) -> None:
    rows = sample_rows(_layout("pairwise-v2"))
    assert rows is not None
    assert changes_beside_others(expr, rows) is None


def test_an_expression_failing_on_the_sample_cannot_tell() -> None:
    rows = sample_rows(_layout("pairwise-v2"))
    assert rows is not None
    assert changes_beside_others(pl.col("rationale").cast(pl.Int64), rows) is None
