"""Hypothesis strategies: records a JSON Schema accepts, for property tests.

Covers the keyword subset rowgate's schemas use (type, enum, const, properties,
required, additionalProperties, items, min/max bounds, pattern). Optional properties
are sometimes absent, open objects sometimes carry undeclared members, free-form
objects get arbitrary JSON. Callers filter with the compiled validator for keywords
this builder ignores (allOf / if-then).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# JSON text values with awkward characters: escapes, non-BMP, U+E000+ and controls.
TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
    max_size=40,
)
KEYS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8
)
FINITE = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | INT64 | FINITE | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=12,
)
JSON_OBJECTS = st.dictionaries(KEYS, JSON_VALUES, max_size=5)


def _resolve(ref: str, root: dict[str, Any]) -> Any:
    node: Any = root
    for part in ref.lstrip("#").split("/")[1:]:
        node = node[part]
    return node


def from_schema(
    schema: Any, root: dict[str, Any] | None = None, depth: int = 0
) -> st.SearchStrategy[Any]:
    """``depth`` counts followed ``$ref``s: recursive schemas (trees) bottom out in empty arrays."""
    root = schema if root is None else root
    if schema is True or schema == {}:
        return JSON_VALUES
    if "$ref" in schema:
        return st.deferred(lambda: from_schema(_resolve(schema["$ref"], root), root, depth + 1))
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    types = schema.get("type")
    if types is None:
        return JSON_VALUES
    if isinstance(types, list):
        return st.one_of([from_schema({**schema, "type": t}, root, depth) for t in types])
    if types == "null":
        return st.none()
    if types == "boolean":
        return st.booleans()
    if types == "integer":
        lo, hi = schema.get("minimum", -(2**63)), schema.get("maximum", 2**63 - 1)
        return st.integers(min_value=lo, max_value=hi)
    if types == "number":
        return FINITE | st.integers(min_value=-(2**53), max_value=2**53)
    if types == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"].replace("$", r"\Z"), fullmatch=False).filter(
                lambda s: schema.get("minLength", 0) <= len(s) <= schema.get("maxLength", 10**9)
            )
        lo = schema.get("minLength", 0)
        return st.text(
            alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
            min_size=lo,
            max_size=max(lo, min(schema.get("maxLength", lo + 30), lo + 30)),
        )
    if types == "array":
        items = schema.get("items", True)
        lo = schema.get("minItems", 0)
        hi = min(schema.get("maxItems", lo + 3), lo + 3)
        return st.lists(
            from_schema(items, root),
            min_size=lo,
            max_size=hi,
            unique=bool(schema.get("uniqueItems")),
        )
    if types == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        extra = schema.get("additionalProperties", True)
        if not props and extra is True:
            base = JSON_OBJECTS
            return base.map(lambda d, r=required: {**dict.fromkeys(r), **d})
        fixed = {k: from_schema(v, root, depth) for k, v in props.items() if k in required}
        optional = {k: from_schema(v, root, depth) for k, v in props.items() if k not in required}
        strategy = st.fixed_dictionaries(fixed, optional=optional)
        if extra is not False:
            extra_values = JSON_VALUES if extra is True else from_schema(extra, root, depth)
            strategy = st.tuples(
                strategy,
                st.dictionaries(KEYS.filter(lambda k: k not in props), extra_values, max_size=3),
            ).map(lambda pair: {**pair[1], **pair[0]})
        return strategy
    raise ValueError(f"no strategy for {schema!r}")
