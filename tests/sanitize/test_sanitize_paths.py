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
        "allOf": [closed],
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
