"""What the sanitizer looks for: categories, their canonical tags, and who wins an overlap.

The categories and tags are seed 002's table ("Heuristic PII and credential
sanitization"), spelled exactly as it spells them. The order of :class:`Category` is the
overlap priority: credentials first, as the seed asks ("prioritize credential matches
over generic strings"), then the most specific identifiers, phone numbers last because
their candidates are the loosest.
"""

from __future__ import annotations

import re
from collections import Counter
from enum import StrEnum
from typing import Final

__all__ = ["PRIORITY", "TAG_PATTERN", "Category", "count_detail", "tag"]


class Category(StrEnum):
    """A kind of secret or personal data, in overlap priority order (first wins)."""

    BEARER_TOKEN = "bearer_token"
    API_KEY = "api_key"
    NATIONAL_ID = "national_id"
    EMAIL = "email"
    IPV6 = "ipv6"
    IPV4 = "ipv4"
    PHONE = "phone"


#: Lower wins when detections of different categories overlap.
PRIORITY: Final = {category: rank for rank, category in enumerate(Category)}

_TAGS: Final = {category: f"[REDACTED_PII:{category.name}]" for category in Category}

#: A canonical tag, whoever wrote it. Tags are never trusted as receipts (a contributor
#: can type one); they are only text the detectors leave alone, which keeps re-running
#: the sanitizer over its own output a no-op.
TAG_PATTERN: Final = re.compile(r"\[REDACTED_PII:(?:" + "|".join(c.name for c in Category) + r")\]")


def tag(category: Category) -> str:
    """The replacement text for ``category``, e.g. ``[REDACTED_PII:EMAIL]``."""
    return _TAGS[category]


def count_detail(counts: Counter[Category]) -> str:
    """``email=2 phone=1``: categories in priority order with their counts (the only
    thing about a finding that is ever written down)."""
    return " ".join(f"{c.value}={counts[c]}" for c in sorted(counts, key=PRIORITY.__getitem__))
