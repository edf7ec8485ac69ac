"""polars' SQL functions as scoring bindings: those that read other rows are refused,
by name and, whatever polars calls them, by the probe over sample rows; those that read
the row's own values are accepted, and give a row of the bundled samples the same value
alone as beside the others.

The catalogue names the functions polars 2.1's SQL accepts. A polars release that
renames a node, or makes a function read other rows, fails a test here."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import orjson
import polars as pl
import pyarrow as pa
import pytest

from pipeline.core.config import CampaignConfig, ConfigError
from pipeline.core.row_local import row_values
from pipeline.gate.gate import Gate
from pipeline.kinds import get_kind
from pipeline.rubrics import bindings
from pipeline.rubrics.bindings import compile_expression

KIND = "pairwise-v2"
F, S, R = "ratings.factuality", "ratings.style", "rationale"
WORDS = f"STRING_TO_ARRAY({R}, ' ')"

READS_OTHER_ROWS = {
    "AVG": f"{F} - AVG({F})",
    "COUNT": f"COUNT({F})",
    "COUNT DISTINCT": f"COUNT(DISTINCT {F})",
    "COUNT(*)": "COUNT(*)",
    "FIRST": f"FIRST({F})",
    "LAST": f"LAST({F})",
    "MAX": f"MAX({F})",
    "MIN": f"MIN({F})",
    "MEDIAN": f"MEDIAN({F})",
    "SUM": f"SUM({F})",
    "STDDEV": f"STDDEV({F})",
    "VARIANCE": f"VARIANCE({F})",
    "QUANTILE_CONT": f"QUANTILE_CONT({F}, 0.5)",
    "QUANTILE_DISC": f"QUANTILE_DISC({F}, 0.5)",
    "APPROX_QUANTILE": f"APPROX_QUANTILE({F}, 0.5)",
    "CORR": f"CORR({F}, {S})",
    "COVAR": f"COVAR({F}, {S})",
    "COVAR_SAMP": f"COVAR_SAMP({F}, {S})",
    "STRING_AGG": f"LENGTH(STRING_AGG({R}, ','))",
    "ARRAY_AGG": f"ARRAY_LENGTH(ARRAY_AGG({F}))",
    "ARRAY_CONTAINS of ARRAY_AGG": f"IF(ARRAY_CONTAINS(ARRAY_AGG({F}), 3), 1, 0)",
    "ROW_NUMBER": "ROW_NUMBER() OVER ()",
    "RANK": f"RANK() OVER (ORDER BY {S})",
    "DENSE_RANK": f"DENSE_RANK() OVER (ORDER BY {S})",
    "PERCENT_RANK": "PERCENT_RANK() OVER (ORDER BY task_id)",
    "CUME_DIST": "CUME_DIST() OVER (ORDER BY task_id)",
    "NTILE": "NTILE(2) OVER (ORDER BY task_id)",
    "LAG": f"LAG({F}) OVER (ORDER BY task_id)",
    "LEAD": f"LEAD({F}) OVER (ORDER BY task_id)",
    "FIRST_VALUE": f"FIRST_VALUE({F}) OVER (ORDER BY task_id)",
    "LAST_VALUE": f"LAST_VALUE({F}) OVER (ORDER BY task_id)",
    "NTH_VALUE": f"NTH_VALUE({F}, 2) OVER (ORDER BY task_id)",
    "MAX OVER PARTITION": f"MAX({F}) OVER (PARTITION BY preference)",
    "SUM OVER ORDER": f"SUM({F}) OVER (ORDER BY task_id)",
}

READS_ITS_ROW = {
    "ABS": f"ABS({F} - 4)",
    "CBRT": f"CBRT({F})",
    "CEIL": f"CEIL({F} / 3)",
    "FLOOR": f"FLOOR({F} / 3)",
    "DIV": f"DIV({F}, 3)",
    "MOD": f"MOD({F}, 3)",
    "%": f"{F} % 3",
    "//": f"{F} // 2",
    "/": f"({F} + {S}) / 3",
    "EXP": f"EXP({F})",
    "LN": f"LN({F} + 1)",
    "LOG10": f"LOG10({F} + 1)",
    "LOG1P": f"LOG1P({F})",
    "LOG2": f"LOG2({F} + 1)",
    "PI": f"PI() * {F}",
    "POW": f"POW({F}, 2)",
    "POWER": f"POWER({F}, 0.5)",
    "ROUND": f"ROUND({F} / 3, 2)",
    "SIGN": f"SIGN({F} - 3)",
    "SQRT": f"SQRT({F})",
    "DEGREES": f"DEGREES({F})",
    "RADIANS": f"RADIANS({F})",
    "SIN": f"SIN({F})",
    "COS": f"COS({F})",
    "TAN": f"TAN({F})",
    "COT": f"COT({F} + 1)",
    "ASIN": f"ASIN({F} / 100)",
    "ACOS": f"ACOS({F} / 100)",
    "ATAN": f"ATAN({F})",
    "ATAN2": f"ATAN2({F}, {S})",
    "SIND": f"SIND({F})",
    "ATAND": f"ATAND({F})",
    "BIT_AND": f"BIT_AND({F}, 3)",
    "BIT_OR": f"BIT_OR({F}, 4)",
    "BIT_XOR": f"BIT_XOR({F}, 4)",
    "BIT_COUNT": f"BIT_COUNT({F})",
    "COALESCE": f"COALESCE({F}, 1)",
    "GREATEST": f"GREATEST({F}, {S})",
    "LEAST": f"LEAST({F}, {S})",
    "IFNULL": f"IFNULL({F}, 0)",
    "NULLIF": f"NULLIF({F}, 3)",
    "IF": f"IF({F} > 3, 1, 2)",
    "CASE": f"CASE WHEN {F} > 3 THEN 1 ELSE {S} END",
    "BETWEEN": f"IF({F} BETWEEN 2 AND 4, 1, 0)",
    "IN": "IF(preference IN ('A', 'B'), 1, 0)",
    "TRY_CAST": "TRY_CAST(SPLIT_PART(task_id, '-', 2) AS DOUBLE)",
    "CAST": f"CAST({F} AS DOUBLE)",
    "LENGTH": f"LENGTH({R})",
    "CHAR_LENGTH": f"CHAR_LENGTH({R})",
    "OCTET_LENGTH": f"OCTET_LENGTH({R})",
    "BIT_LENGTH": f"BIT_LENGTH({R})",
    "CONCAT": f"LENGTH(CONCAT({R}, preference))",
    "CONCAT_WS": f"LENGTH(CONCAT_WS('-', {R}, preference))",
    "||": f"LENGTH({R} || preference)",
    "STARTS_WITH": f"IF(STARTS_WITH({R}, 'A'), 1, 0)",
    "ENDS_WITH": f"IF(ENDS_WITH({R}, '.'), 1, 0)",
    "INITCAP": f"LENGTH(INITCAP({R}))",
    "LEFT": f"STRPOS(LEFT({R}, 40), 'e')",
    "RIGHT": f"STRPOS(RIGHT({R}, 40), 'e')",
    "LOWER": f"LENGTH(LOWER({R}))",
    "UPPER": f"LENGTH(UPPER({R}))",
    "LTRIM": f"LENGTH(LTRIM({R}))",
    "RTRIM": f"LENGTH(RTRIM({R}))",
    "TRIM": f"LENGTH(TRIM({R}))",
    "REPLACE": f"LENGTH(REPLACE({R}, 'a', 'bb'))",
    "REGEXP_LIKE": f"IF(REGEXP_LIKE({R}, '^A'), 1, 0)",
    "REGEXP_REPLACE": f"LENGTH(REGEXP_REPLACE({R}, 'a+', 'b'))",
    "REVERSE": f"LENGTH(REVERSE({R}))",
    "SPLIT_PART": f"LENGTH(SPLIT_PART({R}, ' ', 1))",
    "STRPOS": f"STRPOS({R}, 'a')",
    "SUBSTR": f"STRPOS(SUBSTR({R}, 5, 40), 'e')",
    "LIKE": f"IF({R} LIKE '%a%', 1, 0)",
    "ILIKE": f"IF({R} ILIKE '%A%', 1, 0)",
    "STRING_TO_ARRAY": f"ARRAY_LENGTH({WORDS})",
    "ARRAY_GET": f"LENGTH(ARRAY_GET({WORDS}, 1))",
    "ARRAY_LOWER": f"LENGTH(ARRAY_LOWER({WORDS}))",
    "ARRAY_UPPER": f"LENGTH(ARRAY_UPPER({WORDS}))",
    "ARRAY_REVERSE": f"LENGTH(ARRAY_GET(ARRAY_REVERSE({WORDS}), 1))",
    "ARRAY_UNIQUE": "ARRAY_LENGTH(ARRAY_UNIQUE(messages))",
    "ARRAY_TO_STRING": f"LENGTH(ARRAY_TO_STRING(ARRAY_REVERSE({WORDS}), ','))",
    "ARRAY_CONTAINS": f"IF(ARRAY_CONTAINS({WORDS}, 'the'), 1, 0)",
    "DATE_PART": f"DATE_PART('year', DATE '2024-01-02') + {F}",
    "COLUMNS": "CASE WHEN COLUMNS('^preference$') = 'A' THEN 5 ELSE 1 END",
}


@cache
def _fields() -> tuple[pa.Field, ...]:
    return tuple(Gate(CampaignConfig()).kind_gate(get_kind(KIND)).layout.fields)


def _compile(source: str) -> pl.Expr:
    return compile_expression(source, _fields(), "numeric", "scoring.pairwise-v2.criteria.c")


@cache
def _bundled_rows() -> pa.RecordBatch:
    """The bundled sample's pairwise-v2 records the layout takes (its defect lines
    aside), as the gate stages them."""
    layout = Gate(CampaignConfig()).kind_gate(get_kind(KIND)).layout
    root = Path(__file__).resolve().parents[2]
    records = []
    for line in (root / "data" / f"{KIND}.jsonl").read_bytes().splitlines():
        try:
            record = orjson.loads(line)
            layout.columns([record])
        except Exception:
            continue
        records.append(record)
    return pa.record_batch(layout.columns(records), schema=pa.schema(layout.fields))


@pytest.mark.parametrize("source", READS_OTHER_ROWS.values(), ids=READS_OTHER_ROWS.keys())
def test_a_function_reading_other_rows_is_refused(source: str) -> None:
    with pytest.raises(ConfigError, match="reads other rows"):
        _compile(source)


@pytest.mark.parametrize("source", READS_OTHER_ROWS.values(), ids=READS_OTHER_ROWS.keys())
def test_the_probe_refuses_it_whatever_polars_names_it(
    monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """With no construct of polars' tree known for reading other rows (as a polars
    release that renames them would leave it), the sample rows still show it."""
    monkeypatch.setattr(bindings, "_other_rows", lambda tree: None)
    with pytest.raises(ConfigError, match="a row's value alone differs from its value beside"):
        _compile(source)


def test_the_probe_found_a_function_the_names_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``APPROX_QUANTILE`` passed the names until the probe refused it."""
    names = bindings._OTHER_ROWS_FUNCTIONS - {"ApproxQuantile"}
    monkeypatch.setattr(bindings, "_OTHER_ROWS_FUNCTIONS", names)
    with pytest.raises(ConfigError, match="a row's value alone differs"):
        _compile(READS_OTHER_ROWS["APPROX_QUANTILE"])


@pytest.mark.parametrize("source", READS_ITS_ROW.values(), ids=READS_ITS_ROW.keys())
def test_a_function_of_the_row_s_own_values_is_accepted_and_reads_its_row_alone(
    source: str,
) -> None:
    """Accepted, and on the bundled records (not the probe's sample rows) each row's
    value alone is its value beside the others."""
    expr = _compile(source)
    rows = _bundled_rows()
    assert rows.num_rows > 100
    together = row_values(rows, {"v": expr})
    assert together["v"].drop_nulls().n_unique() > 1 or source.startswith("IF(")
    for row in range(rows.num_rows):
        alone = row_values(rows.slice(row, 1), {"v": expr})
        assert alone.equals(together.slice(row, 1), null_equal=True), (row, source)
