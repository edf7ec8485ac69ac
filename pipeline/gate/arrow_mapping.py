"""JSON Schema → Arrow: an explicit, lossless column layout per record kind (DESIGN §3.4).

The layout is derived from the schema, never inferred from data:

==========================================  ===========================================
schema                                      Arrow
==========================================  ===========================================
``string`` / string ``enum`` / ``const``    ``string`` (dictionary-encoded in Parquet)
``integer``                                 ``int64``
``number``                                  ``float64``
``boolean``                                 ``bool``
``T`` or ``null``, required                 nullable ``T``
``array`` with ``items``                    ``list<item>``
object with ``properties``                  ``struct``; undeclared members of an open object
                                            go to a ``__extra__`` field as canonical JSON
object with only ``additionalProperties``   ``map<string, value>``
free-form object, unions, recursive refs    canonical JSON text (``string``)
optional *and* nullable property            canonical JSON text (keeps absent ≠ null)
==========================================  ===========================================

Round trip: ``decode(encode(record))`` has the same canonical JSON as ``record`` for
every record the schema accepts (property-tested). Numbers go through float64, so an
integer in a ``number`` field beyond 2**53 cannot be stored exactly: :class:`MappingError`.
JSON Schema counts an integral float (``1e19``) as an integer, and int64 cannot hold one
beyond its range: :meth:`Codec.wide_integer` finds it, and the gate rejects the line
(``json.number_range``) as it does an integer literal beyond int64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import orjson
import pyarrow as pa

from pipeline.core.errors import EXIT_INPUT, RowgateError
from pipeline.records.canonical import canonical_json
from pipeline.records.schemas import resolve_ref

__all__ = ["EXTRA_FIELD", "Codec", "MappingError", "RecordLayout", "derive_layout"]

EXTRA_FIELD: Final = "__extra__"
_EXACT_FLOAT_INT: Final = 2**53
_INT64_MIN: Final = -(2**63)
_INT64_END: Final = 2**63


class MappingError(RowgateError, ValueError):
    """A schema-valid value that the derived Arrow layout cannot hold exactly."""

    exit_code: ClassVar[int] = EXIT_INPUT


class Codec:
    """Converts one JSON value to its Arrow-ready Python form and back."""

    arrow_type: pa.DataType
    #: True when ``encode`` returns its argument unchanged for every valid value, which
    #: lets whole batches skip the per-value Python calls.
    identity: bool = True
    #: True when a value may hold an int64 position (:meth:`wide_integer` looks there)
    integers: bool = False

    def encode(self, value: Any) -> Any:
        return value

    def decode(self, value: Any) -> Any:
        return value

    def wide_integer(self, value: Any) -> bool:
        """Whether a schema-valid ``value`` holds, at an int64 position, an integral
        float outside int64 (``1e19``: an integer to JSON Schema, not to Arrow)."""
        return False


@dataclass(eq=False)
class Scalar(Codec):
    arrow_type: pa.DataType


class Integer(Codec):
    arrow_type = pa.int64()
    integers = True

    def wide_integer(self, value: Any) -> bool:
        return type(value) is float and not _INT64_MIN <= value < _INT64_END


class Number(Codec):
    arrow_type = pa.float64()
    identity = False

    def encode(self, value: Any) -> Any:
        if type(value) is int and not -_EXACT_FLOAT_INT <= value <= _EXACT_FLOAT_INT:
            raise MappingError("integer beyond 2**53 in a number field cannot be stored exactly")
        return value


class JsonText(Codec):
    """Canonical JSON text: free-form objects, unions, recursion, optional-nullable."""

    arrow_type = pa.string()
    identity = False

    def encode(self, value: Any) -> Any:
        return canonical_json(value).decode("utf-8")

    def decode(self, value: Any) -> Any:
        return None if value is None else orjson.loads(value)


@dataclass(eq=False)
class ListOf(Codec):
    item: Codec

    def __post_init__(self) -> None:
        self.arrow_type = pa.list_(self.item.arrow_type)
        self.identity = self.item.identity
        self.integers = self.item.integers

    def encode(self, value: Any) -> Any:
        if value is None or self.identity:
            return value
        return [None if v is None else self.item.encode(v) for v in value]

    def decode(self, value: Any) -> Any:
        if value is None:
            return None
        return [None if v is None else self.item.decode(v) for v in value]

    def wide_integer(self, value: Any) -> bool:
        item = self.item
        return item.integers and any(v is not None and item.wide_integer(v) for v in value)


@dataclass(eq=False)
class MapOf(Codec):
    value: Codec

    def __post_init__(self) -> None:
        self.arrow_type = pa.map_(pa.string(), self.value.arrow_type)
        self.identity = self.value.identity
        self.integers = self.value.integers

    def encode(self, value: Any) -> Any:
        if value is None or self.identity:
            return value
        return {k: None if v is None else self.value.encode(v) for k, v in value.items()}

    def decode(self, value: Any) -> Any:
        if value is None:
            return None
        return {k: None if v is None else self.value.decode(v) for k, v in value}

    def wide_integer(self, value: Any) -> bool:
        codec = self.value
        return codec.integers and any(
            v is not None and codec.wide_integer(v) for v in value.values()
        )


@dataclass(frozen=True)
class Member:
    name: str
    codec: Codec
    required: bool
    #: optional and nullable: a present null is stored as the text ``null``
    null_as_text: bool = False


@dataclass(eq=False)
class Struct(Codec):
    members: tuple[Member, ...]
    closed: bool

    def __post_init__(self) -> None:
        fields = [pa.field(m.name, m.codec.arrow_type) for m in self.members]
        if not self.closed:
            fields.append(pa.field(EXTRA_FIELD, pa.string()))
        self.arrow_type = pa.struct(fields)
        self.identity = self.closed and all(m.codec.identity for m in self.members)
        self.integers = any(m.codec.integers for m in self.members)
        self._names = frozenset(m.name for m in self.members)
        self._integer_members = tuple(m for m in self.members if m.codec.integers)

    def wide_integer(self, value: Any) -> bool:
        for m in self._integer_members:
            v = value.get(m.name)
            if v is not None and m.codec.wide_integer(v):
                return True
        return False

    def encode(self, value: Any) -> Any:
        if value is None or self.identity:
            return value
        out: dict[str, Any] = {}
        for m in self.members:
            if m.name not in value:
                out[m.name] = None
                continue
            v = value[m.name]
            out[m.name] = m.codec.encode(v) if v is not None or m.null_as_text else None
        if not self.closed:
            extra = {k: v for k, v in value.items() if k not in self._names}
            out[EXTRA_FIELD] = canonical_json(extra).decode("utf-8") if extra else None
        return out

    def decode(self, value: Any) -> Any:
        if value is None:
            return None
        out: dict[str, Any] = {}
        for m in self.members:
            v = value.get(m.name)
            if v is None and not m.required:
                continue  # absent (optional members that may be null are JsonText)
            out[m.name] = None if v is None else m.codec.decode(v)
        extra = value.get(EXTRA_FIELD) if not self.closed else None
        if extra is not None:
            out.update(orjson.loads(extra))
        return out


@dataclass(frozen=True)
class RecordLayout:
    """The Arrow layout of one record kind: one column per top-level member.

    ``renames`` maps a top-level JSON member to a different column name (a kind keeps
    provenance such as pw-decide-row's ``meta`` apart from training features as ``_meta``).
    """

    root: Struct
    renames: dict[str, str] = field(default_factory=dict)

    @property
    def fields(self) -> list[pa.Field]:
        return [f.with_name(self.renames.get(f.name, f.name)) for f in self.root.arrow_type]

    @property
    def sources(self) -> list[tuple[str, pa.Field]]:
        """(JSON member name, output field) per column."""
        return [
            (f.name, f.with_name(self.renames.get(f.name, f.name))) for f in self.root.arrow_type
        ]

    @property
    def column_names(self) -> list[str]:
        return [f.name for f in self.fields]

    def encode_rows(self, records: Sequence[dict[str, Any]]) -> Sequence[dict[str, Any]]:
        if self.root.identity:
            return records
        return [self.root.encode(r) for r in records]

    def columns(self, records: Sequence[dict[str, Any]]) -> list[pa.Array]:
        """Arrow arrays for ``records`` (already schema-valid), one per top-level field.

        Per-column ``pa.array`` over a list comprehension is ~3.5× faster than
        ``Table.from_pylist`` on 3 KB rows (measured: 5 µs against 18 µs per row).
        """
        rows = self.encode_rows(records)
        return [pa.array([row.get(name) for row in rows], type=f.type) for name, f in self.sources]

    def decode_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """The JSON record for one Arrow row (``Table.to_pylist`` form)."""
        result = self.root.decode({name: row.get(f.name) for name, f in self.sources})
        assert isinstance(result, dict)
        return result


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


_ALL_TYPES: Final = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})


def _allowed_types(schema: dict[str, Any]) -> frozenset[str]:
    allowed = set(_ALL_TYPES)
    declared = schema.get("type")
    if declared is not None:
        names = {declared} if isinstance(declared, str) else set(declared)
        if "number" in names:
            names.add("integer")  # JSON Schema's number includes integers
        allowed &= names
    if "const" in schema:
        allowed &= {_json_type(schema["const"])}
    if "enum" in schema:
        allowed &= {_json_type(v) for v in schema["enum"]}
    return frozenset(allowed)


def _codec(schema: Any, root: dict[str, Any], seen: frozenset[str]) -> Codec:
    if schema is True or schema == {}:
        return JsonText()
    if not isinstance(schema, dict):
        raise MappingError(f"cannot map schema {schema!r}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref in seen:
            return JsonText()  # recursive structure: Arrow types cannot recurse
        target = resolve_ref(ref, root)
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        merged = {**target, **siblings} if isinstance(target, dict) else target
        return _codec(merged, root, seen | {ref})
    types = _allowed_types(schema) - {"null"}
    if types == {"integer", "number"}:
        return Number()
    if len(types) != 1:
        return JsonText()
    (kind,) = types
    if kind == "string":
        return Scalar(pa.string())
    if kind == "integer":
        return Integer()
    if kind == "number":
        return Number()
    if kind == "boolean":
        return Scalar(pa.bool_())
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, dict) or not items:
            return JsonText()
        return ListOf(_codec(items, root, seen))
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    if props:
        closed = extra is False and not schema.get("patternProperties")
        return _struct(schema, props, closed, root, seen)
    if isinstance(extra, dict) and extra and not schema.get("patternProperties"):
        return MapOf(_codec(extra, root, seen))
    return JsonText()  # free-form object


def _struct(
    schema: dict[str, Any],
    props: dict[str, Any],
    closed: bool,
    root: dict[str, Any],
    seen: frozenset[str],
) -> Struct:
    if EXTRA_FIELD in props:
        raise MappingError(f"a schema property may not be named {EXTRA_FIELD!r}")
    required = set(schema.get("required", []))
    members = []
    for name, sub in props.items():
        codec = _codec(sub, root, seen)
        is_required = name in required
        nullable = isinstance(sub, dict) and "null" in _allowed_types(
            resolve_ref(sub["$ref"], root) if "$ref" in sub else sub
        )
        null_as_text = not is_required and nullable
        if null_as_text:
            codec = JsonText()  # absent and null must stay distinguishable
        members.append(Member(name, codec, is_required, null_as_text))
    return Struct(tuple(members), closed)


def derive_layout(schema: dict[str, Any], renames: dict[str, str] | None = None) -> RecordLayout:
    """Derive the Arrow layout of the records ``schema`` accepts (top level: an object)."""
    props = schema.get("properties") or {}
    closed = schema.get("additionalProperties", True) is False and not schema.get(
        "patternProperties"
    )
    renames = dict(renames or {})
    if set(renames) - set(props):
        raise MappingError(f"cannot rename undeclared members {sorted(set(renames) - set(props))}")
    return RecordLayout(_struct(schema, props, closed, schema, frozenset()), renames)
