"""Bindings: a campaign's map from rubric criteria and gates to a kind's columns.

Seed 000: pairwise ratings and code-review criteria have different names and need "an
adapter ... Never invent a tie label or missing rating". The adapter is explicit in the
campaign config (``[scoring.<kind>]``), and every binding is a polars SQL expression
(:func:`polars.sql_expr`) over the kind's typed columns: a field path such as
``ratings.factuality`` is the simplest one, ``CASE WHEN ... END`` the most general. SQL,
not Python: a config file never executes code. Bindings are compiled and type-checked
against the kind's Arrow layout (an empty frame) before any line is read, so a typo is a
config error naming its key, not a column of nulls.

=====================  ===========================================  ==================
binding                meaning                                      type
=====================  ===========================================  ==================
``criteria.<id>``      the criterion's score on the rubric's scale  numeric
``applies.<id>``       false → ``not_applicable``, null → unknown   boolean
``gates.<name>``       ``builtin``: the built-in evaluator;          boolean (``max_*``
                       ``not_applicable``: the campaign declares     / ``min_*``:
                       the gate does not apply to this kind;         numeric)
                       anything else: an evidence expression
``code``               the Python source the built-in gates read    string
=====================  ===========================================  ==================

Unbound criteria and gates are ``unknown`` on every row (never a pass); they are listed
in the manifest.

A binding that can fail on a row's value is refused before any line is read where its
type says so: a strict ``CAST`` (or ``::``) of text to anything else, of a float to an
integer, or of an integer to a narrower one, is a config error that asks for ``TRY_CAST``
(a value that does not convert is then null: the criterion or gate is unknown, never a
pass). A binding that reads other rows (an aggregate such as ``AVG(x)``, a window
function, ``COUNT(*)``, ``UNNEST``) is refused too: a row's value must read that row
alone, since rows are scored a staged batch at a time. It is found by name in polars'
expression tree, and by behaviour over sample rows of the layout
(:mod:`pipeline.core.row_local`). Any other failure while the
bindings are evaluated is a :class:`BindingError` naming the campaign key, the rubric,
the expression and the kind of failure; never the value, which polars' own message
quotes (a record value may be a secret).
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import polars as pl
import pyarrow as pa

from pipeline.core.config import ConfigError, KindScoring
from pipeline.core.expression_errors import failure_kind, first_line
from pipeline.core.row_local import changes_beside_others, sample_rows
from pipeline.rubrics.builtin_gates import BUILTIN_GATES
from pipeline.rubrics.model import Criterion, Gate, GateKind, Rubric, RubricError

__all__ = [
    "BUILTIN",
    "NOT_APPLICABLE",
    "BindingError",
    "CriterionBinding",
    "GateBinding",
    "GateMode",
    "ScoringPlan",
    "compile_expression",
    "compile_scoring",
    "field_path",
]

BUILTIN: Final = "builtin"
NOT_APPLICABLE: Final = "not_applicable"
_FIELD_PATH: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class BindingError(RubricError):
    """A scoring binding failed while it was evaluated over the staged rows; the run
    stops and nothing is written (CLI exit 3, like every rubric the run refuses). The
    message names the binding and the kind of failure, never a value."""

    @classmethod
    def evaluating(cls, key: str, rubric: str, source: str, error: BaseException) -> BindingError:
        return cls(
            f"{key}: the binding {source!r} (rubric {rubric}) failed on the staged rows: "
            f"{failure_kind(error)}; nothing was written"
        )


class GateMode(StrEnum):
    BUILTIN = "builtin"
    EVIDENCE = "evidence"
    NOT_APPLICABLE = "not_applicable"
    UNBOUND = "unbound"


@dataclass(frozen=True, eq=False)
class CriterionBinding:
    criterion: Criterion
    #: the score expression as written, or None when unbound
    source: str | None
    score: pl.Expr | None
    applies_source: str | None
    applies: pl.Expr | None
    #: the campaign declares the criterion does not apply to this kind
    not_applicable: bool
    #: a safe field path for reasons (``$.ratings.style``), "" for computed expressions
    path: str


@dataclass(frozen=True, eq=False)
class GateBinding:
    gate: Gate
    mode: GateMode
    source: str | None
    evidence: pl.Expr | None
    path: str


@dataclass(frozen=True, eq=False)
class ScoringPlan:
    """A rubric bound to one record kind: everything the scoring stage evaluates."""

    kind: str
    rubric: Rubric
    criteria: tuple[CriterionBinding, ...]
    gates: tuple[GateBinding, ...]
    code_source: str | None
    code: pl.Expr | None
    code_path: str
    allowed_imports: frozenset[str]
    allow_stdlib: bool

    @property
    def not_applicable_gates(self) -> frozenset[str]:
        return frozenset(g.gate.name for g in self.gates if g.mode is GateMode.NOT_APPLICABLE)

    def paths(self) -> dict[str, str]:
        """Safe field paths of criteria and gates, for reasons."""
        found = {c.criterion.id: c.path for c in self.criteria}
        found.update({g.gate.name: g.path for g in self.gates})
        return found

    def describe(self) -> dict[str, Any]:
        """The manifest's record of the bindings."""
        return {
            "rubric": self.rubric.describe(),
            "criteria": {
                c.criterion.id: NOT_APPLICABLE if c.not_applicable else c.source
                for c in self.criteria
            },
            "applies": {
                c.criterion.id: c.applies_source for c in self.criteria if c.applies_source
            },
            "gates": {
                g.gate.name: g.source if g.mode is GateMode.EVIDENCE else g.mode.value
                for g in self.gates
            },
            "unbound": sorted(
                [c.criterion.id for c in self.criteria if c.source is None and not c.not_applicable]
                + [g.gate.name for g in self.gates if g.mode is GateMode.UNBOUND]
            ),
            "code": self.code_source,
            "allowed_imports": sorted(self.allowed_imports),
            "allow_stdlib": self.allow_stdlib,
        }


def field_path(source: str) -> str:
    """``$.a.b`` for a plain field path binding, "" for a computed expression."""
    return "$." + source if _FIELD_PATH.fullmatch(source) else ""


def _empty_frame(fields: Sequence[pa.Field]) -> pl.DataFrame:
    frame = pl.from_arrow(pa.schema(list(fields)).empty_table())
    assert isinstance(frame, pl.DataFrame)
    return frame


def compile_expression(source: str, fields: Sequence[pa.Field], wanted: str, where: str) -> pl.Expr:
    """Compile one SQL binding and check its result type on an empty frame of the layout.

    ``wanted`` is ``numeric``, ``boolean`` or ``string``; numeric results are cast to
    Float64 (SQL arithmetic may give decimals).
    """
    if not source.strip():
        raise ConfigError(f"{where}: empty expression")
    try:
        expr = pl.sql_expr(source)
        dtype = _empty_frame(fields).select(expr.alias("v")).schema["v"]
    except pl.exceptions.PolarsError as exc:
        raise ConfigError(
            f"{where}: {source!r} is not a usable expression "
            f"({type(exc).__name__}: {first_line(exc)})"
        ) from None
    tree = _tree(expr)
    other_rows = _other_rows(tree)
    if other_rows is None:
        other_rows = _changes_beside_others(source, tuple(fields))
    if other_rows is not None:
        raise ConfigError(
            f"{where}: {source!r} reads other rows ({other_rows}); a binding's value for a "
            "row reads that row alone (rows are scored a staged batch at a time, so it "
            "would depend on which rows the gate staged beside it)"
        )
    conversion = _fallible_conversion(tree, _empty_frame(fields))
    if conversion is not None:
        raise ConfigError(
            f"{where}: {source!r} casts {conversion} with CAST, which stops the run at the "
            "first value that does not convert; use TRY_CAST (such a value becomes null: "
            "unknown, never a pass)"
        )
    ok = {
        "numeric": dtype.is_numeric() or dtype == pl.Null,
        "boolean": dtype in (pl.Boolean, pl.Null),
        "string": dtype in (pl.String, pl.Null),
    }[wanted]
    if not ok:
        raise ConfigError(f"{where}: {source!r} gives {dtype}, expected a {wanted} value")
    if wanted == "numeric":
        return expr.cast(pl.Float64)
    return expr.cast(pl.Boolean if wanted == "boolean" else pl.String)


#: integer types by (signed, bits)
_INTEGERS: Final[dict[type[pl.DataType], tuple[bool, int]]] = {
    pl.Int8: (True, 8),
    pl.Int16: (True, 16),
    pl.Int32: (True, 32),
    pl.Int64: (True, 64),
    pl.Int128: (True, 128),
    pl.UInt8: (False, 8),
    pl.UInt16: (False, 16),
    pl.UInt32: (False, 32),
    pl.UInt64: (False, 64),
    pl.UInt128: (False, 128),
}


def _cast_can_fail(source: pl.DataType, target: pl.DataType) -> bool:
    """Whether a strict cast from ``source`` to ``target`` fails on some value."""
    if source == target or target == pl.String or source == pl.Null:
        return False
    if source == pl.String:
        return True
    if source.is_float() and target.is_integer():
        return True
    if source.is_integer() and target.is_integer():
        signed, bits = _INTEGERS.get(type(source), (True, 128))
        target_signed, target_bits = _INTEGERS.get(type(target), (False, 0))
        if signed and not target_signed:
            return True  # negative values
        return target_bits < (bits + 1 if target_signed and not signed else bits)
    return False


def _subtrees(tree: Any) -> Iterator[dict[str, Any]]:
    if isinstance(tree, dict):
        yield tree
        for value in tree.values():
            yield from _subtrees(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _subtrees(value)


#: Expression nodes whose value for a row reads other rows, as polars serializes them,
#: most telling first (an aggregate's tree may hold a ``Len`` check too)
_OTHER_ROWS_NODES: Final = {
    "Agg": "an aggregate such as AVG, SUM, MIN, MAX, FIRST, COUNT(x) or ARRAY_AGG",
    "Over": "a window function (OVER)",
    "Window": "a window function (OVER)",
    "Explode": "UNNEST",
    "Sort": "a sort",
    "SortBy": "a sort",
    "Gather": "a row taken by position",
    "Filter": "a filter",
    "Slice": "a slice of the rows",
    "Len": "COUNT(*)",
}
#: Functions (``{"Function": {"function": NAME}}``, or under ``Boolean``) that read
#: other rows; functions under a namespace (``ListExpr``, ``StringExpr``, ...) read the
#: row's own value
_OTHER_ROWS_FUNCTIONS: Final = frozenset(
    {
        "Rank", "Shift", "ShiftAndFill", "CumCount", "CumSum", "CumProd", "CumMin",
        "CumMax", "Diff", "Unique", "Reverse", "FillNullWithStrategy", "Interpolate",
        "RollingExpr", "RollingExprBy", "PctChange", "Mode", "ArgUnique", "UniqueCounts",
        "ValueCounts", "Hist", "IsDuplicated", "IsUnique", "IsFirstDistinct",
        "IsLastDistinct", "Range", "Quantile", "ApproxQuantile", "Correlation", "Any",
        "All", "Entropy", "Skew", "Kurtosis", "ArgMin", "ArgMax", "NullCount",
        "SearchSorted", "Implode",
        "NUnique", "ApproxNUnique", "Std", "Var", "Median", "Mean", "Sum", "Min", "Max",
        "Product", "First", "Last", "Count", "Len", "Sort", "ArgSort", "TopK", "BottomK",
        "Repeat", "ExtendConstant", "DropNulls", "DropNans", "GatherEvery", "Head", "Tail",
    }
)  # fmt: skip
#: Cross-row functions polars writes around another (a null check): named last
_HELPER_FUNCTIONS: Final = frozenset({"Any", "All", "NullCount", "Len", "Count", "DropNulls"})
#: Values that hold no expression: a literal's value, a column's or selector's name
_NOT_EXPRESSIONS: Final = frozenset({"Literal", "Column", "Columns", "Selector", "DtypeColumn"})
#: ``Eval`` variants whose evaluation reads one row's own list or array
_PER_ROW_EVAL: Final = frozenset({"List", "Array"})


def _tree(expr: pl.Expr) -> Any:
    """polars' serialized tree of ``expr`` (JSON), read by the checks below; ``None`` for
    an expression it cannot serialize, which they then do not check (the run still stops
    with a :class:`BindingError` naming the binding, should it fail)."""
    try:
        return json.loads(expr.meta.serialize(format="json"))
    except Exception:
        return None


def _other_rows(tree: Any) -> str | None:
    """What in an expression's ``tree`` (:func:`_tree`) reads rows other than the one its
    value is for (an aggregate, a window, ``COUNT(*)``, ...), else ``None``; inside a
    list's own evaluation (``Eval`` of a list or array: ``ARRAY_UNIQUE``, ...) the "rows"
    are that row's elements, which is fine."""
    found: list[str] = []
    _collect_other_rows(tree, found)
    ranked = [*_OTHER_ROWS_NODES.values()]
    # a function is named before COUNT(*), which is often only an aggregate's own check,
    # and a helper polars wraps around one (CORR's null check, Any) after the others
    function = ranked.index(_OTHER_ROWS_NODES["Len"]) - 0.5
    helper = {_function_found(name) for name in _HELPER_FUNCTIONS}

    def rank(what: str) -> float:
        if what in ranked:
            return ranked.index(what)
        return function + (0.25 if what in helper else 0)

    return min(found, key=rank, default=None)


def _function_found(name: str) -> str:
    """What :func:`_other_rows` says of a cross-row function."""
    return f"polars' {name}, which reads the column's other rows"


def _collect_other_rows(tree: Any, found: list[str]) -> None:
    """Append to ``found`` what in ``tree`` reads other rows."""
    if isinstance(tree, list):
        for item in tree:
            _collect_other_rows(item, found)
        return
    if tree == "Len":  # a node without fields, where an expression stands
        found.append(_OTHER_ROWS_NODES["Len"])
    if not isinstance(tree, dict):
        return
    for key, value in tree.items():
        if key in _NOT_EXPRESSIONS:
            continue
        if key == "Alias" and isinstance(value, list):
            value = value[:1]  # [expression, name]
        if key in _OTHER_ROWS_NODES:
            found.append(_OTHER_ROWS_NODES[key])
        elif key == "Eval" and isinstance(value, dict):
            variant = value.get("variant")
            per_row = (variant if isinstance(variant, str) else None) in _PER_ROW_EVAL
            _collect_other_rows(value.get("expr") if per_row else value, found)
        elif key == "Function" and isinstance(value, dict):
            name = _function_name(value.get("function"))
            if name in _OTHER_ROWS_FUNCTIONS:
                found.append(_function_found(name))
            _collect_other_rows(value.get("input"), found)
        else:
            _collect_other_rows(value, found)


@functools.lru_cache(maxsize=256)
def _changes_beside_others(source: str, fields: tuple[pa.Field, ...]) -> str | None:
    """How the expression ``source`` shows it reads other rows when no construct in its
    tree names it: over sample rows of the layout
    (:func:`~pipeline.core.row_local.sample_rows`), a row's value alone is not its value
    beside the others; else ``None``. This catches a function that reads other rows
    under a name :data:`_OTHER_ROWS_FUNCTIONS` does not hold (``APPROX_QUANTILE``; a
    polars release may add or rename one). Remembered: a run compiles its bindings in
    several stages and in every shard's task, and this takes ~5 ms a binding."""
    rows = sample_rows(fields)
    if rows is None or changes_beside_others(pl.sql_expr(source), rows) is None:
        return None
    return "a row's value alone differs from its value beside other rows"


def _function_name(function: Any) -> str | None:
    """A serialized function's name: ``"Shift"``, ``{"Rank": {...}}``, or under
    ``Boolean`` (``{"Boolean": "IsDuplicated"}``); a namespace's name otherwise."""
    if isinstance(function, dict) and len(function) == 1:
        ((name, inner),) = function.items()
        if name == "Boolean":
            return _function_name(inner)
        return str(name)
    return function if isinstance(function, str) else None


def _dtype(tree: Any, frame: pl.DataFrame) -> pl.DataType | None:
    try:
        expr = pl.Expr.deserialize(io.StringIO(json.dumps(tree)), format="json")
        return frame.select(expr.alias("v")).schema["v"]
    except Exception:  # an expression tree this polars does not round-trip: not checked
        return None


def _fallible_conversion(tree: Any, frame: pl.DataFrame) -> str | None:
    """``"<from> to <to>"`` for the first strict cast in an expression's ``tree``
    (:func:`_tree`) that can fail on a value of its operand's type in the layout (an
    empty frame), else ``None``."""
    for node in _subtrees(tree):
        cast = node.get("Cast")
        if not isinstance(cast, dict) or cast.get("options") != "Strict":
            continue
        source, target = _dtype(cast.get("expr"), frame), _dtype(node, frame)
        if source is not None and target is not None and _cast_can_fail(source, target):
            return f"{source} to {target}"
    return None


def _unknown_keys(given: dict[str, str], known: Sequence[str], where: str, what: str) -> None:
    for key in given:
        if key not in known:
            raise ConfigError(
                f"{where}.{key}: the rubric has no {what} {key!r} (it has: {', '.join(known)})"
            )


def compile_scoring(
    kind: str, settings: KindScoring, rubric: Rubric, fields: Sequence[pa.Field]
) -> ScoringPlan:
    """Check a kind's bindings against its rubric and Arrow layout; compile them."""
    where = f"scoring.{kind}"
    criterion_ids = [c.id for c in rubric.criteria]
    gate_names = [g.name for g in rubric.gates]
    _unknown_keys(settings.criteria, criterion_ids, f"{where}.criteria", "criterion")
    _unknown_keys(settings.applies, criterion_ids, f"{where}.applies", "criterion")
    _unknown_keys(settings.gates, gate_names, f"{where}.gates", "gate")

    criteria = []
    for criterion in rubric.criteria:
        source = settings.criteria.get(criterion.id)
        applies_source = settings.applies.get(criterion.id)
        not_applicable = source == NOT_APPLICABLE
        if not_applicable and applies_source is not None:
            raise ConfigError(
                f"{where}.applies.{criterion.id}: the criterion is bound as not_applicable"
            )
        score = (
            compile_expression(source, fields, "numeric", f"{where}.criteria.{criterion.id}")
            if source is not None and not not_applicable
            else None
        )
        applies = (
            compile_expression(applies_source, fields, "boolean", f"{where}.applies.{criterion.id}")
            if applies_source is not None
            else None
        )
        criteria.append(
            CriterionBinding(
                criterion,
                None if not_applicable else source,
                score,
                applies_source,
                applies,
                not_applicable,
                field_path(source) if source and not not_applicable else "",
            )
        )

    code = None
    if settings.code is not None:
        code = compile_expression(settings.code, fields, "string", f"{where}.code")
    gates = []
    for gate in rubric.gates:
        source = settings.gates.get(gate.name)
        gate_where = f"{where}.gates.{gate.name}"
        if source is None:
            gates.append(GateBinding(gate, GateMode.UNBOUND, None, None, ""))
        elif source == NOT_APPLICABLE:
            gates.append(GateBinding(gate, GateMode.NOT_APPLICABLE, None, None, ""))
        elif source == BUILTIN:
            if gate.name not in BUILTIN_GATES:
                raise ConfigError(
                    f"{gate_where}: no built-in evaluator for {gate.name!r} "
                    f"(built-ins: {', '.join(BUILTIN_GATES)}); bind an evidence expression"
                )
            if BUILTIN_GATES[gate.name] != (gate.kind is GateKind.EQUALS):
                raise ConfigError(f"{gate_where}: the rubric's value does not fit the built-in")
            if code is None:
                raise ConfigError(f"{gate_where}: built-in gates need `{where}.code`")
            path = field_path(settings.code) if settings.code else ""
            gates.append(GateBinding(gate, GateMode.BUILTIN, None, None, path))
        else:
            wanted = "boolean" if gate.kind is GateKind.EQUALS else "numeric"
            evidence = compile_expression(source, fields, wanted, gate_where)
            gates.append(GateBinding(gate, GateMode.EVIDENCE, source, evidence, field_path(source)))
    return ScoringPlan(
        kind=kind,
        rubric=rubric,
        criteria=tuple(criteria),
        gates=tuple(gates),
        code_source=settings.code,
        code=code,
        code_path=field_path(settings.code) if settings.code else "",
        allowed_imports=frozenset(settings.allowed_imports),
        allow_stdlib=settings.allow_stdlib,
    )
