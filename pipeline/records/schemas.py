"""Schema registry: pinned Draft 2020-12 schemas, linted, compiled, digested (DESIGN §3.3).

fastjsonschema implements draft-07 semantics and silently ignores keywords it does not
know, so a schema is only loaded when every keyword it uses is one fastjsonschema
enforces with 2020-12 meaning (:data:`ALLOWED_KEYWORDS`). Two adjustments keep the
meaning right rather than refusing useful schemas:

* ``$ref`` beside other keywords: draft-07 ignores the siblings, 2020-12 applies them.
  The compiled copy rewrites ``{"$ref": r, k: v}`` to ``{"allOf": [{"$ref": r}, {k: v}]}``.
* ``format`` is an annotation in 2020-12; it is compiled with ``use_formats=False``.
  Security-relevant formats are checked by explicit record-kind rules instead.

Before the lint, a schema is validated against the official 2020-12 metaschema
(:mod:`pipeline.records.metaschema`): ``"minLength": -1`` or ``"type": "strng"`` anywhere
in it is refused with the JSON pointer of the bad keyword.

The SHA-256 recorded for a schema is that of its exact file bytes, before any rewrite.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final
from urllib.parse import unquote

import fastjsonschema

from pipeline.core.bundled import bundled_dir
from pipeline.core.errors import EXIT_INPUT, RowgateError
from pipeline.core.files import refuse_special
from pipeline.core.reasons import Reason, RejectLine, schema_code
from pipeline.records.lineage import check_pin
from pipeline.records.metaschema import DIALECT, metaschema_documents
from pipeline.records.strict_json import parse_object

__all__ = [
    "ALLOWED_KEYWORDS",
    "SchemaEntry",
    "SchemaError",
    "SchemaRegistry",
    "integers_bounded",
    "lint_schema",
    "metaschema_problems",
    "number_paths",
    "resolve_ref",
    "safe_path",
    "static_bounds",
]

SCHEMA_DIR: Final = bundled_dir("schemas")

# Keywords fastjsonschema enforces with their 2020-12 meaning, plus pure annotations.
ASSERTIONS: Final = frozenset(
    {
        "type", "enum", "const",
        "properties", "required", "additionalProperties", "patternProperties",
        "propertyNames", "minProperties", "maxProperties",
        "items", "minItems", "maxItems", "uniqueItems", "contains",
        "minLength", "maxLength", "pattern", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
        "$ref", "$defs", "definitions",
    }
)  # fmt: skip
ANNOTATIONS: Final = frozenset(
    {
        "$schema", "$id", "$comment", "title", "description", "default", "examples",
        "deprecated", "readOnly", "writeOnly",
    }
)  # fmt: skip
ALLOWED_KEYWORDS: Final = ASSERTIONS | ANNOTATIONS

# Keywords whose value is a map of name -> subschema, and those holding subschema lists.
_SCHEMA_MAPS: Final = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS: Final = ("allOf", "anyOf", "oneOf")
_SCHEMA_VALUES: Final = (
    "additionalProperties", "propertyNames", "items", "contains", "not", "if", "then", "else",
)  # fmt: skip
# ECMA-262 and Python disagree on these classes (\d matches Arabic-Indic digits in Python).
_UNPORTABLE_PATTERN: Final = re.compile(r"(?<!\\)(?:\\\\)*\\[dDwWbBpP]")
# RFC 6901: an array index is 0 or digits without a leading zero
_ARRAY_INDEX: Final = re.compile(r"0|[1-9][0-9]*")


class SchemaError(RowgateError, ValueError):
    """A schema file that rowgate refuses to load, with every problem found."""

    exit_code: ClassVar[int] = EXIT_INPUT


def resolve_ref(ref: str, root: Any) -> Any:
    """The subschema that a local ``$ref`` names in the schema document ``root``.

    A local reference is a URI fragment holding an RFC 6901 JSON Pointer: ``#`` is the
    root, ``#/$defs/a~1b`` the member ``a/b`` of ``$defs`` (``~1`` is ``/``, ``~0`` is
    ``~``), ``#/allOf/0`` an array's first element. The fragment is percent-decoded
    first (RFC 6901 §6), as fastjsonschema does when it compiles the same reference.

    >>> resolve_ref("#/$defs/m~0n~1s", {"$defs": {"m~n/s": {"type": "string"}}})
    {'type': 'string'}

    Raises :class:`SchemaError` for a reference that is not a local JSON Pointer or
    names nothing in ``root``.
    """
    pointer = unquote(ref[1:]) if isinstance(ref, str) and ref.startswith("#") else None
    if pointer is None or (pointer and not pointer.startswith("/")):
        raise SchemaError(f"$ref {ref!r}: not a local JSON Pointer ('#' or '#/...')")
    node = root
    for token in pointer.split("/")[1:]:
        member = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and member in node:
            node = node[member]
        elif isinstance(node, list) and _ARRAY_INDEX.fullmatch(member) and int(member) < len(node):
            node = node[int(member)]
        else:
            raise SchemaError(f"$ref {ref!r}: the schema has nothing at {member!r}")
    return node


def _walk(schema: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (json-pointer, subschema) for every object subschema, root first."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key in _SCHEMA_MAPS:
        members = schema.get(key)
        if isinstance(members, dict):
            for name, sub in members.items():
                yield from _walk(sub, f"{path}/{key}/{name}")
    for key in _SCHEMA_LISTS:
        members = schema.get(key)
        if isinstance(members, list):
            for i, sub in enumerate(members):
                yield from _walk(sub, f"{path}/{key}/{i}")
    for key in _SCHEMA_VALUES:
        if key in schema:
            yield from _walk(schema[key], f"{path}/{key}")


def lint_schema(schema: Any) -> list[str]:
    """Return every reason ``schema`` cannot be enforced faithfully; empty when it can."""
    if not isinstance(schema, dict | bool):
        return ["a schema must be an object or a boolean"]
    problems = []
    if isinstance(schema, dict) and schema.get("$schema", DIALECT) != DIALECT:
        problems.append(f"/$schema: only the Draft 2020-12 dialect ({DIALECT}) is supported")
    for path, sub in _walk(schema, ""):
        problems.extend(
            f"{path or '/'}: keyword {key!r} is not enforced by fastjsonschema "
            "with 2020-12 semantics"
            for key in sub
            if key not in ALLOWED_KEYWORDS
        )
        if path and ("$id" in sub or "$schema" in sub):
            problems.append(f"{path}: '$id'/'$schema' are only allowed at the root")
        if isinstance(sub.get("items"), list):
            problems.append(f"{path}/items: array form is draft-07 tuple syntax (prefixItems)")
        ref = sub.get("$ref")
        if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
            problems.append(f"{path}/$ref: only local references ('#...') are allowed")
        pattern = sub.get("pattern")
        patterns = [pattern] if isinstance(pattern, str) else []
        patterns += list(sub.get("patternProperties", {}) or {})
        problems.extend(
            f"{path}: pattern {p!r} uses \\d, \\w, \\b or \\p, which Python's re does not "
            "read as ECMA-262 does; write an explicit class"
            for p in patterns
            if _UNPORTABLE_PATTERN.search(p)
        )
    return problems


def _rewrite_ref_siblings(schema: Any) -> Any:
    """Give ``$ref`` its 2020-12 meaning (siblings apply too) under draft-07 semantics."""
    if isinstance(schema, list):
        return [_rewrite_ref_siblings(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        key: _rewrite_ref_siblings(value) if key not in ("const", "enum", "default") else value
        for key, value in schema.items()
    }
    if "$ref" in out:
        siblings = {
            k: v
            for k, v in out.items()
            if k in ASSERTIONS and k not in ("$ref", "$defs", "definitions")
        }
        if siblings:
            keep = {k: v for k, v in out.items() if k not in siblings and k != "$ref"}
            keep["allOf"] = [{"$ref": out["$ref"]}, siblings]
            return keep
    return out


def _refuse_remote(uri: str) -> Any:
    raise SchemaError(f"remote schema reference refused: {uri}")


_NO_REMOTE: Final[Mapping[str, Callable[[str], Any]]] = dict.fromkeys(
    ("http", "https", "file", "ftp", "data", "urn", ""), _refuse_remote
)


def compile_schema(schema: Any, *, fast_fail: bool = True) -> Callable[[Any], Any]:
    """Compile a linted schema: no injected defaults, formats as annotations, no remote refs."""
    return fastjsonschema.compile(
        _rewrite_ref_siblings(schema),
        handlers=_NO_REMOTE,
        use_default=False,
        use_formats=False,
        # detailed_exceptions=False breaks `const` in fastjsonschema 2.22 (KeyError at
        # compile time); the detail costs nothing on the valid path.
        detailed_exceptions=True,
        fast_fail=fast_fail,
    )


@functools.cache
def _metaschema_validator() -> Callable[[Any], Any]:
    """The 2020-12 metaschema compiled once per process (~0.06 s), every error reported."""
    documents = metaschema_documents()

    def shipped(uri: str) -> Any:
        found = documents.get(uri.split("#", 1)[0])
        return _refuse_remote(uri) if found is None else _rewrite_ref_siblings(found)

    return fastjsonschema.compile(
        _rewrite_ref_siblings(documents[DIALECT]),
        handlers={**_NO_REMOTE, "https": shipped},
        use_default=False,
        use_formats=False,
        detailed_exceptions=True,
        fast_fail=False,
    )


def _every_error(validate: Callable[[Any], Any], instance: Any) -> list[Any]:
    """The errors a validator compiled with ``fast_fail=False`` finds (empty: valid)."""
    try:
        validate(instance)
    except fastjsonschema.JsonSchemaValuesException as exc:
        return list(exc.errors)
    except fastjsonschema.JsonSchemaValueException as exc:
        return [exc]
    return []


def _pointer(parts: list[str | int]) -> str:
    """RFC 6901 JSON pointer of ``parts`` (``/`` for the root)."""
    escaped = (str(p).replace("~", "~0").replace("/", "~1") for p in parts)
    return "/" + "/".join(escaped) if parts else "/"


def metaschema_problems(schema: Any) -> list[str]:
    """Every place ``schema`` breaks the 2020-12 metaschema, as ``<JSON pointer>: why``
    (the pointer names the bad keyword, e.g. ``/properties/a/minLength``); empty when
    it is a valid 2020-12 schema."""
    problems = set()
    for error in _every_error(_metaschema_validator(), schema):
        keyword = str(error.rule or "invalid")
        if keyword in ("anyOf", "oneOf", "allOf", "not", "if"):
            why = f"is none of the forms the 2020-12 metaschema allows there ({keyword})"
        else:
            why = f"breaks the 2020-12 metaschema ({keyword} {_short(error.rule_definition)})"
        problems.add(f"{_pointer(instance_parts(schema, str(error.name or 'data')))}: {why}")
    return sorted(problems)


INFINITE: Final = math.inf


def static_bounds(
    schema: Any, root: Any | None = None, _seen: frozenset[str] = frozenset()
) -> tuple[float, float]:
    """Upper bounds (depth, items per container) of every instance the schema accepts.

    Sound but not tight: ``inf`` wherever the schema leaves shape open (an object without
    ``additionalProperties: false``, an array without ``maxItems``, a recursive ``$ref``).
    Depth follows :func:`pipeline.records.strict_json.measure`: scalars 0, ``{}`` 1. The gate
    uses this to skip the limits walk for records the schema has accepted.
    """
    root = schema if root is None else root
    if schema is False:
        return 0, 0
    if not isinstance(schema, dict):
        return INFINITE, INFINITE
    # allOf members all apply: any one of them bounds the instance.
    bounds = [_own_bounds(schema, root, _seen)]
    bounds += [static_bounds(sub, root, _seen) for sub in schema.get("allOf", []) or []]
    depth = min(b[0] for b in bounds)
    items = min(b[1] for b in bounds)
    return depth, items


def integers_bounded(schema: dict[str, Any]) -> bool:
    """True when every integer an accepted record can hold lies inside int64.

    Needs a closed shape (finite :func:`static_bounds`: every position is typed) and a
    ``minimum`` and ``maximum`` within int64 on every ``integer`` position. The gate's
    fast parser then needs no check for integers beyond int64: such a value fails the
    schema, and failing lines are re-gated on the reference path.
    """
    if static_bounds(schema)[0] == INFINITE:
        return False
    low, high = -(2**63), 2**63 - 1
    for _, sub in _walk(schema, ""):
        types = sub.get("type")
        names = {types} if isinstance(types, str) else set(types or ())
        if "integer" in names or "number" in names:
            minimum, maximum = sub.get("minimum"), sub.get("maximum")
            if minimum is None or maximum is None or minimum < low or maximum > high:
                return False
    return True


NumberPaths = frozenset[tuple[str, ...]]


def number_paths(
    schema: Any, root: Any | None = None, _seen: frozenset[str] = frozenset()
) -> NumberPaths | None:
    """Key paths (object members only, from the record root) at which an accepted record
    can hold a number; ``None`` where the schema leaves that open.

    Sound, not tight: every number in every instance the schema accepts sits at one of
    the paths. A node's shape keywords are read (``type``, ``const``, ``enum``,
    ``properties``, ``additionalProperties``, ``patternProperties``, ``items``,
    ``maxItems``, a ``$ref``'s target); applicators (``allOf``, ``if``/``then``, ...) are
    not, since they can only narrow what those admit. ``None`` for an open shape (no
    ``type``, an object without ``additionalProperties: false``), a number possible inside
    an array, or a recursive ``$ref``. The gate uses this to look for floats at a few
    paths instead of walking the whole record.
    """
    root = schema if root is None else root
    if schema is False:
        return frozenset()
    if not isinstance(schema, dict):
        return None
    if "$ref" in schema:
        ref = schema["$ref"]
        return None if ref in _seen else number_paths(resolve_ref(ref, root), root, _seen | {ref})
    if "const" in schema or "enum" in schema:
        literals = [schema["const"]] if "const" in schema else list(schema["enum"])
        if any(isinstance(v, dict | list) for v in literals):
            return None
        numeric = any(isinstance(v, int | float) and not isinstance(v, bool) for v in literals)
        return frozenset({()}) if numeric else frozenset()
    types = schema.get("type")
    if types is None or "prefixItems" in schema:
        return None
    found: set[tuple[str, ...]] = set()
    for kind in [types] if isinstance(types, str) else types:
        if kind in ("number", "integer"):
            found.add(())
        elif kind == "object":
            if schema.get("additionalProperties") is not False or schema.get("patternProperties"):
                return None
            for name, sub in schema.get("properties", {}).items():
                below = number_paths(sub, root, _seen)
                if below is None:
                    return None
                found.update((name, *path) for path in below)
        elif kind == "array" and schema.get("maxItems") != 0:
            inside = number_paths(schema["items"], root, _seen) if "items" in schema else None
            if inside is None or inside:
                return None
    return frozenset(found)


def _literal_bounds(values: list[Any]) -> tuple[float, float]:
    from pipeline.records.strict_json import measure

    measured = [measure(v) for v in values] or [(0, 0)]
    return max(m[0] for m in measured), max(m[1] for m in measured)


def _own_bounds(schema: dict[str, Any], root: Any, seen: frozenset[str]) -> tuple[float, float]:
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref in seen:
            return INFINITE, INFINITE
        return static_bounds(resolve_ref(ref, root), root, seen | {ref})
    if "const" in schema:
        return _literal_bounds([schema["const"]])
    if "enum" in schema:
        return _literal_bounds(list(schema["enum"]))
    types = schema.get("type")
    if types is None:
        return INFINITE, INFINITE
    types = [types] if isinstance(types, str) else list(types)
    depth: float = 0
    items: float = 0
    for kind in types:
        if kind == "object":
            if schema.get("additionalProperties") is not False or schema.get("patternProperties"):
                return INFINITE, INFINITE
            props = schema.get("properties", {})
            sub = [static_bounds(s, root, seen) for s in props.values()] or [(0, 0)]
            depth = max(depth, 1 + max(b[0] for b in sub))
            items = max(items, len(props), *(b[1] for b in sub))
        elif kind == "array":
            if "maxItems" not in schema or "items" not in schema:
                if schema.get("maxItems") == 0:
                    depth, items = max(depth, 1), max(items, 0)
                    continue
                return INFINITE, INFINITE
            child_depth, child_items = static_bounds(schema["items"], root, seen)
            depth = max(depth, 1 + child_depth)
            items = max(items, schema["maxItems"], child_items)
    return depth, items


@dataclass(frozen=True)
class SchemaEntry:
    """One pinned schema: stable id, exact-bytes digest, and its compiled validators."""

    id: str
    path: Path
    sha256: str
    schema: dict[str, Any]
    validate: Callable[[Any], Any] = field(repr=False)

    @functools.cached_property
    def _validate_all(self) -> Callable[[Any], Any]:
        """The validator that reports every error, compiled on the first invalid record:
        a process that meets none never pays for it (it was half of every schema's
        compile time, paid at start-up by the run's parent and by each worker)."""
        try:
            return compile_schema(self.schema, fast_fail=False)
        except fastjsonschema.JsonSchemaDefinitionException as exc:
            raise SchemaError(f"{self.path}: does not compile: {exc}") from None

    @property
    def title(self) -> str:
        return str(self.schema.get("title", ""))

    def errors(self, record: Any) -> list[Reason]:
        """Every schema violation of ``record`` as safe reasons (empty when valid)."""
        reasons = {
            _safe_reason(self.schema, record, err)
            for err in _every_error(self._validate_all, record)
        }
        return sorted(reasons, key=lambda r: (r.path, r.code, r.detail))


def _safe_reason(schema: dict[str, Any], record: Any, error: Any) -> Reason:
    """Path + keyword + a schema-derived detail; never the offending value or its keys."""
    keyword = str(error.rule or "invalid")
    path = _safe_path(schema, instance_parts(record, str(error.name or "data")))
    definition = error.rule_definition
    if keyword == "required" and isinstance(error.value, dict) and isinstance(definition, list):
        # the names come from the schema's list (its vocabulary), never from the record
        missing = [name for name in definition if name not in error.value]
        detail = "missing " + ", ".join(missing) if missing else f"required {_short(definition)}"
        return Reason(schema_code(keyword), path, _short(detail))
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                   "minLength", "maxLength", "minItems", "maxItems", "multipleOf",
                   "minProperties", "maxProperties", "type", "enum", "const", "pattern",
                   "required"):  # fmt: skip
        detail = f"{keyword} {_short(definition)}"
    elif keyword == "additionalProperties":
        detail = "undeclared property"
    else:
        detail = keyword
    return Reason(schema_code(keyword), path, detail)


def _short(value: Any, limit: int = 120) -> str:
    import orjson

    text = orjson.dumps(value).decode() if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


_INDEX: Final = re.compile(r"\[(\d+)\]")


def instance_parts(record: Any, name: str) -> list[str | int]:
    """The members and indices of ``record`` that fastjsonschema's error ``name`` names.

    fastjsonschema writes a path as text (``data.labels.guides.a.b[0]``) and splits it on
    ``.``, ``[`` and ``]``, so a map key holding those characters became several parts and
    ``$.labels.guides.*.*.*`` revealed the key's shape. The text is read back against the
    record instead: at an object, the member is a key of that object the text continues
    with (the key up to the next delimiter first, then longer ones); at an array, an
    index. Where no reading reaches the end (it always should), the path stops at the
    deepest container that was resolved.
    """
    rest = name[4:] if name.startswith("data") else name
    failed: set[tuple[int, int]] = set()
    best: list[str | int] = []

    def walk(node: Any, at: int, parts: list[str | int]) -> list[str | int] | None:
        nonlocal best
        if at == len(rest):
            return parts
        if len(parts) > len(best):
            best = list(parts)
        if (id(node), at) in failed:
            return None
        found: list[str | int] | None = None
        if rest[at] == "[" and isinstance(node, list):
            index = _INDEX.match(rest, at)
            if index is not None and int(index.group(1)) < len(node):
                i = int(index.group(1))
                found = walk(node[i], index.end(), [*parts, i])
        elif rest[at] == "." and isinstance(node, dict):
            start = at + 1
            ends = [i for i in range(start, len(rest)) if rest[i] in ".["] + [len(rest)]
            for end in ends:
                key = rest[start:end]
                if key in node:
                    found = walk(node[key], end, [*parts, key])
                    if found is not None:
                        break
        if found is None:
            failed.add((id(node), at))
        return found

    return walk(record, 0, []) or best


def _safe_path(schema: Any, parts: list[Any]) -> str:
    """Render a field path, writing ``*`` for any key the schema does not declare.

    fastjsonschema reports array indices as strings; the schema says which parts index
    an array. The parser's locator gives them as ints. Indices are safe to show,
    undeclared keys (map keys, extra members) not.
    """
    out = ["$"]
    node = schema
    for part in parts:
        if isinstance(node, dict) and "$ref" in node:
            try:
                node = resolve_ref(node["$ref"], schema)
            except SchemaError:
                node = None
        # an int is an index wherever it stands (the parser's locator gives ints for a
        # list's places: a top-level array under an object schema was rendered `$.*`)
        if isinstance(part, int) or (
            isinstance(node, dict) and "items" in node and str(part).isdigit()
        ):
            out.append(f"[{part}]")
            node = node.get("items") if isinstance(node, dict) else None
            continue
        props = node.get("properties", {}) if isinstance(node, dict) else {}
        if isinstance(props, dict) and part in props:
            out.append(f".{part}")
            node = props[part]
        else:
            out.append(".*")
            node = node.get("additionalProperties") if isinstance(node, dict) else None
    return "".join(out)


def safe_path(schema: dict[str, Any], parts: list[str | int]) -> str:
    """Render the field path ``parts`` of an instance of ``schema`` safely: indices and
    declared property names as they are, any undeclared key (a map key, an extra
    member) as ``*``, e.g. ``$.messages[2].content`` or ``$.meta.*``."""
    return _safe_path(schema, list(parts))


@functools.lru_cache(maxsize=64)
def _compiled(data: bytes) -> Callable[[Any], Any]:
    """The validator of the schema file ``data`` (parsed and linted by the caller), compiled
    once per process: compiling is most of loading a schema (~50 ms each, ~0.4 s for the
    bundled ones), and every run's preflight loads them all. A function of the bytes
    alone, and a validator keeps no state, so runs in one process (an API user's, the
    test suite's) share it; a failed compile is not cached."""
    return compile_schema(parse_object(data, max_depth=256, max_items=100_000))


def load_schema(path: Path, schema_id: str) -> SchemaEntry:
    """Read, strictly parse, lint and compile one schema file."""
    refuse_special(path, str(path), error=SchemaError)
    data = path.read_bytes()
    try:
        schema = parse_object(data, max_depth=256, max_items=100_000)
    except RejectLine as exc:
        raise SchemaError(
            f"{path}: not strict JSON ({exc.reason.code}: {exc.reason.detail})"
        ) from None
    problems = metaschema_problems(schema) or lint_schema(schema)
    if problems:
        raise SchemaError.listing(f"{path}: refused:", *problems)
    try:
        validate = _compiled(data)
    except fastjsonschema.JsonSchemaDefinitionException as exc:
        raise SchemaError(f"{path}: does not compile: {exc}") from None
    return SchemaEntry(
        id=schema_id,
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        schema=schema,
        validate=validate,
    )


class SchemaRegistry:
    """Schemas by stable id; the id is the file name without ``.schema.json``."""

    def __init__(self, directory: Path = SCHEMA_DIR, pins: Mapping[str, str] | None = None) -> None:
        self.directory = directory
        self._entries: dict[str, SchemaEntry] = {}
        self._pins = dict(pins or {})

    def ids(self) -> list[str]:
        return sorted(
            p.name.removesuffix(".schema.json") for p in self.directory.glob("*.schema.json")
        )

    def get(self, schema_id: str) -> SchemaEntry:
        entry = self._entries.get(schema_id)
        if entry is None:
            path = self.directory / f"{schema_id}.schema.json"
            if not path.is_file():
                raise SchemaError(f"no schema {schema_id!r} in {self.directory}")
            entry = load_schema(path, schema_id)
            check_pin(f"schema {schema_id!r}", entry.sha256, self._pins.get(schema_id), SchemaError)
            self._entries[schema_id] = entry
        return entry
