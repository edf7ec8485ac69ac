"""Field selectors: parsed strictly, checked against the kind's schema through its refs."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.sanitize.paths import FieldSelector, SelectorError


def _schema(ref: str) -> dict[str, Any]:
    closed = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"text": {"type": "string"}},
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {"turn": {"$ref": ref}},
        "$defs": {"a turn": closed, "chain": {"$ref": "#/$defs/a%20turn"}},
        # also a constraint on the root, which must allow its own members
        "allOf": [{**closed, "properties": {**closed["properties"], "turn": True}}],
    }


@pytest.mark.parametrize("ref", ["#/$defs/a%20turn", "#/$defs/chain", "#/allOf/0"])
def test_a_selector_is_checked_through_the_refs_it_crosses(ref: str) -> None:
    """Through ``#/$defs/a%20turn`` the selector check saw no schema at all (it looked
    for the member ``a%20turn``) and let a misspelt field pass, unscanned; ``#/allOf/0``
    raised AttributeError."""
    schema = _schema(ref)
    FieldSelector.parse("$.turn.text").check(schema)
    with pytest.raises(SelectorError, match=r"\$.turn has no member 'txet'"):
        FieldSelector.parse("$.turn.txet").check(schema)


SHAPES: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"content": {"type": "string"}},
            },
        },
        "problem": {"type": "string"},
        "note": {"type": ["string", "null"]},
        "label": {"const": "x"},
        "ratings": {"type": "object", "additionalProperties": {"type": "integer"}},
        "meta": {"type": "object"},
        "either": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/closed"}]},
        "both": {"allOf": [{"$ref": "#/$defs/closed"}, {"type": "object"}]},
    },
    "$defs": {
        "closed": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"text": {"type": "string"}},
        }
    },
}


@pytest.mark.parametrize(
    "text",
    [
        "$",
        "$.messages",
        "$.messages[*]",
        "$.messages[*].content",
        "$.ratings.*",
        "$.ratings.anything",
        "$.meta.anything.below[*]",  # an object allowing additional members: free-form
        "$.either.text",
        "$.both.text",
    ],
)
def test_a_selector_the_schema_can_hold_passes(text: str) -> None:
    FieldSelector.parse(text).check(SHAPES)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "$.messages.content",
            r"\$\.messages is an array: it has no members \(its elements: \$\.messages\[\*\]\)",
        ),
        ("$.problem.x", r"\$\.problem is a string: it has no members$"),
        ("$.note.x", r"\$\.note is null or a string: it has no members"),
        ("$.label.x", r"\$\.label is a string: it has no members"),
        ("$.ratings.x.y", r"\$\.ratings\.x is a number: it has no members"),
        ("$.ratings[*]", r"\$\.ratings is an object, not an array \(use \.\* for its members\)"),
        ("$.problem[*]", r"\$\.problem is a string, not an array$"),
        ("$.either.txet", r"\$\.either has no member 'txet'"),
        ("$.both.txet", r"\$\.both has no member 'txet'"),
    ],
)
def test_a_selector_that_names_nothing_is_refused(text: str, message: str) -> None:
    """A member step on an array or a string passed (only a closed object's members were
    checked): ``$.messages.content`` for ``$.messages[*].content`` scanned nothing and
    an e-mail, a phone number and an SSN were stored as written (red team)."""
    with pytest.raises(SelectorError, match=message):
        FieldSelector.parse(text).check(SHAPES)
