"""Duplicate keys: what "the same row" means for a record kind (DESIGN §3.9).

A record kind declares a :class:`DedupeKey` next to its content fingerprint
(``RecordKind.dedupe_key``): the payload columns it needs and the key fields built from
them as polars expressions. Prose fields are normalised (:class:`Normalisation`),
identifier fields are compared as they are, and an *unordered* field (a list) is compared
as a multiset — so a pairwise row with A and B swapped has the same key. The same fields,
joined, are the text that near-duplicate detection shingles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import polars as pl

from pipeline.dedupe.normalise import Normalisation

__all__ = ["DedupeKey", "KeyField", "key_columns", "normalised_parts", "text_columns"]

#: Separator of key components before hashing; components are length-prefixed anyway.
_NULL = "~"


@dataclass(frozen=True)
class KeyField:
    """One component of a duplicate key.

    ``expr`` evaluates to a string, or to a list of strings when ``unordered`` (compared
    as a multiset, sorted after normalisation) or ``ordered`` (compared element by
    element, in order: a conversation's turns, a derivation's steps). A list's elements
    are normalised one by one and length-prefixed in the key, so where one element ends
    is part of the key: joined into one text first, the steps ``["x = 1", "y = 2"]`` and
    ``["x = 1\ny = 2"]`` had one key, and a row was removed as a normalised duplicate of
    a different one. ``prose`` fields are normalised; identifiers (document ids, tool
    names) are not. An ``exact`` field is compared exactly by every rule, near included:
    it is not shingled, and near duplicates share it (``rowgate dedupe --key``;
    :func:`text_columns`).
    """

    name: str
    expr: pl.Expr
    prose: bool = True
    unordered: bool = False
    ordered: bool = False
    exact: bool = False

    def __post_init__(self) -> None:
        if self.ordered and self.unordered:
            raise ValueError(f"key field {self.name!r}: a list is ordered or unordered")

    @property
    def listed(self) -> bool:
        """Whether ``expr`` is a list of strings (ordered or not)."""
        return self.ordered or self.unordered


@dataclass(frozen=True)
class DedupeKey:
    """A kind's duplicate key: the payload ``columns`` it reads and its ``fields``.

    ``split_groups`` name the fields whose values must stay inside one split (``task_id``;
    ``meta.<key>`` reads a key of a JSON-text column).
    """

    description: str
    columns: tuple[str, ...]
    fields: tuple[KeyField, ...]
    split_groups: tuple[str, ...] = field(default=("task_id",))


def _prefixed(expr: pl.Expr) -> pl.Expr:
    """``<byte length>:<text>``, so ("ab", "c") and ("a", "bc") never collide (seed 002)."""
    return (
        pl.when(expr.is_null())
        .then(pl.lit(_NULL))
        .otherwise(expr.str.len_bytes().cast(pl.String) + pl.lit(":") + expr)
    )


def _normalised_parts(key: DedupeKey, normalisation: Normalisation | None) -> list[pl.Expr]:
    """Each key field as a normalised string or sorted list of strings."""
    parts = []
    for f in key.fields:
        norm = normalisation if (normalisation is not None and f.prose) else None
        if f.listed:
            inner = pl.element() if norm is None else norm.text(pl.element())
            part = f.expr.list.eval(inner)
            parts.append(part.list.sort() if f.unordered else part)
        else:
            parts.append(f.expr if norm is None else norm.text(f.expr))
    return parts


def normalised_parts(key: DedupeKey, normalisation: Normalisation) -> list[pl.Expr]:
    """Each key field normalised (``_part<i>``): computed once, they make both the key
    and the text (``parts=`` of :func:`key_columns` and :func:`text_columns`), where
    normalising is most of the cost."""
    return [part.alias(f"_part{i}") for i, part in enumerate(_normalised_parts(key, normalisation))]


def key_columns(
    key: DedupeKey,
    normalisation: Normalisation | None,
    name: str = "_key",
    parts: Sequence[pl.Expr] | None = None,
    *,
    absent: bool = False,
) -> pl.Expr:
    """The whole key as one unambiguous string (length-prefixed components), for exact
    grouping. ``normalisation=None`` gives the raw key (unordered fields still sorted);
    ``parts``: the fields as already normalised (:func:`normalised_parts`). ``absent``:
    null for a row whose every field is null (an unordered one: holds no non-null
    element), which has no key (a dataset's text column with no value, or a row of
    another kind: such rows are no duplicates of each other), instead of the key all
    such rows share."""
    if parts is None:
        parts = _normalised_parts(key, normalisation)
    encoded = []
    for f, part in zip(key.fields, parts, strict=True):
        if f.listed:
            part = part.list.eval(_prefixed(pl.element())).list.join("")
        encoded.append(_prefixed(part))
    whole = pl.concat_str(encoded, separator="")
    if absent:
        missing = [
            _no_element(part) if f.unordered else part.is_null()
            for f, part in zip(key.fields, parts, strict=True)
        ]
        whole = pl.when(pl.all_horizontal(missing)).then(None).otherwise(whole)
    return whole.alias(name)


def _no_element(part: pl.Expr) -> pl.Expr:
    """An unordered field with no value: null, or a list of nulls only (pairwise's two
    responses of a row of another kind, ``concat_list`` of two nulls)."""
    return part.is_null() | part.list.eval(pl.element().is_not_null()).list.any().not_()


def text_columns(
    key: DedupeKey,
    normalisation: Normalisation,
    name: str = "_text",
    parts: Sequence[pl.Expr] | None = None,
) -> pl.Expr:
    """The key's fields as one normalised text (a list's elements a line each, an
    unordered one's sorted), for shingling;
    ``parts``: the fields as already normalised (:func:`normalised_parts`).

    The ``exact`` fields are not in the text: every token of it is suffixed with a hash
    of them instead (``fox`` → ``fox_<hash>``), so that texts whose exact fields differ
    share no token, no shingle and no band key, and are never near duplicates, while
    texts whose exact fields agree keep their tokens' one-to-one map, and their
    similarity (a token is a run of word characters: the suffix stays inside it)."""
    if parts is None:
        parts = _normalised_parts(key, normalisation)
    texts: Sequence[pl.Expr] = [
        (part.list.join("\n") if f.listed else part).fill_null("")
        for f, part in zip(key.fields, parts, strict=True)
        if not f.exact
    ]
    if not texts:  # exact fields only (``--key`` without ``--text``): nothing to shingle
        return pl.repeat(pl.lit(""), pl.len()).alias(name)
    text = pl.concat_str(texts, separator="\n")
    exact = [_prefixed(part) for f, part in zip(key.fields, parts, strict=True) if f.exact]
    if exact:
        scope = pl.concat_str(exact, separator="").hash(_SCOPE_SEED).cast(pl.String)
        text = text.str.replace_all(r"(\w+)", pl.lit("${1}_") + scope)
    return text.alias(name)


#: the seed of the exact fields' hash in a near text (any fixed value: only equality counts)
_SCOPE_SEED: Final = 0x5C09E
