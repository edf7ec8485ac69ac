"""Field selectors: which parts of a parsed record a policy rule is about.

A selector is a path from the record's root: ``$`` (the whole record), ``.name`` (a
member), ``.*`` (any member), ``[*]`` (any element), e.g. ``$.messages[*].content`` or
``$.steps[*].arguments``. A selector names a subtree: every string below it is in
scope. Paths are checked against the kind's schema when a sanitizer is built, so a
misspelt field is a config error rather than a field silently left unscanned.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from pipeline.core.errors import EXIT_USAGE, RowgateError
from pipeline.records.schemas import resolve_ref

__all__ = ["ANY_ELEMENT", "ANY_MEMBER", "FieldSelector", "SelectorError", "SelectorTrie"]

#: Step values for the wildcards; any other step is a member name.
ANY_MEMBER: Final = ".*"
ANY_ELEMENT: Final = "[*]"

_STEP: Final = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\.\*|\[\*\]")


class SelectorError(RowgateError, ValueError):
    """A selector that does not parse or does not name a field of its kind."""

    exit_code: ClassVar[int] = EXIT_USAGE


@dataclass(frozen=True)
class FieldSelector:
    text: str
    steps: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> FieldSelector:
        if not text.startswith("$"):
            raise SelectorError(f"{text!r}: a field path starts with '$'")
        steps = []
        position = 1
        while position < len(text):
            match = _STEP.match(text, position)
            if match is None:
                raise SelectorError(
                    f"{text!r}: expected .name, .* or [*] at character {position + 1}"
                )
            steps.append(match.group(1) or match.group())
            position = match.end()
        return cls(text, tuple(steps))

    def covers(self, parts: Sequence[str | int]) -> bool:
        """Whether the concrete path ``parts`` lies in this selector's subtree."""
        if len(parts) < len(self.steps):
            return False
        for step, part in zip(self.steps, parts, strict=False):
            if step == ANY_ELEMENT:
                if not isinstance(part, int):
                    return False
            elif step == ANY_MEMBER:
                if not isinstance(part, str):
                    return False
            elif part != step:
                return False
        return True

    def values(self, record: Any) -> list[Any]:
        """Every value this selector reaches in ``record``."""
        nodes = [record]
        for step in self.steps:
            following: list[Any] = []
            for node in nodes:
                if step == ANY_ELEMENT and isinstance(node, list):
                    following += node
                elif step == ANY_MEMBER and isinstance(node, dict):
                    following += node.values()
                elif isinstance(node, dict) and step in node:
                    following.append(node[step])
            nodes = following
        return nodes

    def check(self, schema: dict[str, Any], *, selects: str | None = None) -> None:
        """Raise :class:`SelectorError` unless the schema can hold this path: a member
        step needs a value that may be an object (and, where the object is closed, a
        declared member), ``[*]`` one that may be an array, and the value selected one
        that may be of the JSON type ``selects`` when given. ``$ref``, ``allOf``,
        ``anyOf`` and ``oneOf`` are followed; a subschema that says nothing holds any
        path."""
        node: Any = schema
        for i, step in enumerate(self.steps):
            at = _prefix(self.steps[:i])
            types = _types(schema, node)
            if step == ANY_ELEMENT:
                if "array" not in types:
                    hint = " (use .* for its members)" if "object" in types else ""
                    raise SelectorError(f"{self.text}: {at} {_is(types)}, not an array{hint}")
                node = _element(schema, node)
            elif "object" not in types:
                hint = f" (its elements: {at}[*])" if "array" in types else ""
                raise SelectorError(f"{self.text}: {at} {_is(types)}: it has no members{hint}")
            elif step == ANY_MEMBER:
                node = True
            else:
                member = _member(schema, node, step)
                if member is None:
                    raise SelectorError(f"{self.text}: {at} has no member {step!r}")
                node = member
        if selects is not None and selects not in (types := _types(schema, node)):
            raise SelectorError(f"{self.text} {_is(types)}, not {_a(selects)}")


#: JSON value types as JSON Schema names them ("integer" counts as "number" here).
_ANY_TYPE: Final = frozenset({"object", "array", "string", "number", "boolean", "null"})
#: How deep :func:`_types` follows combinators (a recursive schema ends here, permissive).
_DEPTH: Final = 32


def _types(root: dict[str, Any], node: Any, depth: int = 0) -> frozenset[str]:
    """The JSON types a value matching ``node`` may have (``type``, ``const``, ``enum``,
    ``allOf``, ``anyOf``, ``oneOf``, through ``$ref``)."""
    node = _follow_refs(root, node)
    if node is False:
        return frozenset()
    if not isinstance(node, dict) or depth > _DEPTH:
        return _ANY_TYPE
    types = set(_ANY_TYPE)
    if "type" in node:
        named = [node["type"]] if isinstance(node["type"], str) else node["type"]
        types &= {"number" if t == "integer" else t for t in named}
    if "const" in node:
        types &= {_json_type(node["const"])}
    if isinstance(node.get("enum"), list):
        types &= {_json_type(v) for v in node["enum"]}
    for member in node.get("allOf", []):
        types &= _types(root, member, depth + 1)
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            types &= set().union(*(_types(root, b, depth + 1) for b in node[key]))
    return frozenset(types)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _member(root: dict[str, Any], node: Any, name: str, depth: int = 0) -> Any:
    """The subschema a member ``name`` of an object matching ``node`` must match (a
    synthetic ``allOf``/``anyOf`` of what applies), or None when it cannot exist."""
    node = _follow_refs(root, node)
    if node is False:
        return None
    if not isinstance(node, dict) or depth > _DEPTH:
        return True
    conjuncts: list[Any] = []
    if name in node.get("properties", {}):
        conjuncts.append(node["properties"][name])
    conjuncts += [s for p, s in node.get("patternProperties", {}).items() if re.search(p, name)]
    if not conjuncts:
        if node.get("additionalProperties", True) is False:
            return None
        conjuncts.append(node.get("additionalProperties", True))
    for member in node.get("allOf", []):
        found = _member(root, member, name, depth + 1)
        if found is None:
            return None
        conjuncts.append(found)
    for key in ("anyOf", "oneOf"):
        if key in node:
            objects = [b for b in node[key] if "object" in _types(root, b, depth + 1)]
            found = [m for b in objects if (m := _member(root, b, name, depth + 1)) is not None]
            if not found:
                return None
            conjuncts.append({"anyOf": found})
    return conjuncts[0] if len(conjuncts) == 1 else {"allOf": conjuncts}


def _element(root: dict[str, Any], node: Any, depth: int = 0) -> Any:
    """The subschema every element of an array matching ``node`` must match."""
    node = _follow_refs(root, node)
    if not isinstance(node, dict) or depth > _DEPTH:
        return True
    items = node.get("items", True)
    conjuncts: list[Any] = [{"anyOf": items} if isinstance(items, list) else items]
    conjuncts += [_element(root, m, depth + 1) for m in node.get("allOf", [])]
    for key in ("anyOf", "oneOf"):
        if key in node:
            branches = [b for b in node[key] if "array" in _types(root, b, depth + 1)]
            conjuncts.append({"anyOf": [_element(root, b, depth + 1) for b in branches]})
    return {"allOf": conjuncts}


def _is(types: frozenset[str]) -> str:
    """``is a string``, ``is an object or null``, ``can hold no value``."""
    if not types:
        return "can hold no value"
    return "is " + " or ".join(_a(t) for t in sorted(types))


def _a(json_type: str) -> str:
    """``a string``, ``an object``, ``null``."""
    return {"array": "an ", "object": "an ", "null": ""}.get(json_type, "a ") + json_type


def _follow_refs(schema: dict[str, Any], node: Any) -> Any:
    """``node``, or the subschema its ``$ref`` (and the target's, and so on) names."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 32:
        node, seen = resolve_ref(node["$ref"], schema), seen + 1
    return node


def _prefix(steps: Sequence[str]) -> str:
    return "$" + "".join(s if s in (ANY_ELEMENT, ANY_MEMBER) else f".{s}" for s in steps)


class SelectorTrie:
    """Selectors merged into a trie, to walk a record once and know at every node
    whether it is in scope (``whole``) or may lead to something in scope."""

    def __init__(self, selectors: Sequence[FieldSelector] = ()) -> None:
        self.whole = False
        self.children: dict[str, SelectorTrie] = {}
        for selector in selectors:
            self.add(selector.steps)

    def add(self, steps: Sequence[str]) -> None:
        node = self
        for step in steps:
            if node.whole:
                return
            node = node.children.setdefault(step, SelectorTrie())
        node.whole = True
        node.children.clear()

    def member(self, name: str) -> list[SelectorTrie]:
        named, any_member = self.children.get(name), self.children.get(ANY_MEMBER)
        return [c for c in (named, any_member) if c is not None]

    def element(self) -> SelectorTrie | None:
        return self.children.get(ANY_ELEMENT)
