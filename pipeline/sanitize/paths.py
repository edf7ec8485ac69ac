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

    def check(self, schema: dict[str, Any]) -> None:
        """Raise :class:`SelectorError` unless the schema can hold this path."""
        node: Any = schema
        for i, step in enumerate(self.steps):
            node = _follow_refs(schema, node)
            if not isinstance(node, dict):
                return  # a free-form value: any path may exist below it
            if step == ANY_ELEMENT:
                if "items" not in node and "array" not in _types(node):
                    raise SelectorError(f"{self.text}: {_prefix(self.steps[:i])} is not an array")
                node = node.get("items", True)
            elif step == ANY_MEMBER:
                if "properties" not in node and "object" not in _types(node):
                    raise SelectorError(f"{self.text}: {_prefix(self.steps[:i])} is not an object")
                node = True
            else:
                properties = node.get("properties", {})
                if step in properties:
                    node = properties[step]
                elif node.get("additionalProperties", True) is False:
                    raise SelectorError(
                        f"{self.text}: {_prefix(self.steps[:i])} has no member {step!r}"
                    )
                else:
                    node = node.get("additionalProperties", True)


def _types(node: dict[str, Any]) -> list[str]:
    types = node.get("type", [])
    return [types] if isinstance(types, str) else list(types)


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
