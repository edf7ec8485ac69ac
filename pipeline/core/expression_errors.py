"""What evaluating a user's polars expression over rows can raise, and how to say it
without quoting the rows: polars' messages can hold the values that failed (a cast's
failing strings), and record values may be secrets.

Used wherever user expressions meet record data: scoring bindings, report expressions.
"""

from __future__ import annotations

import re
from typing import Final

import polars as pl
import pyarrow as pa

__all__ = ["EVALUATION_ERRORS", "failure_kind", "first_line"]

#: What evaluating an expression over rows can raise. A polars panic is not an Exception.
EVALUATION_ERRORS: Final = (
    pl.exceptions.PolarsError,
    pl.exceptions.PanicException,
    pa.ArrowException,
)


#: Parts of polars' messages that name only types, never values
_SAFE_FAILURES: Final = (
    (
        re.compile(r"conversion from `([^`]{1,40})` to `([^`]{1,40})` failed"),
        "a value does not convert from {0} to {1} (TRY_CAST gives null instead)",
    ),
    (
        re.compile(r"casting from (\w{1,40}) to (\w{1,40}) (?:is )?not supported"),
        "polars cannot cast {0} to {1}",
    ),
    (re.compile(r"^regex error"), "a value is not a valid regular expression"),
)


def failure_kind(error: BaseException) -> str:
    """The class of an evaluation failure and what the types involved say about it; the
    rest of polars' message is withheld: it quotes the values that failed."""
    text = str(error)
    for pattern, explanation in _SAFE_FAILURES:
        found = pattern.search(text)
        if found:
            return f"{type(error).__name__}, {explanation.format(*found.groups())}"
    return f"{type(error).__name__} (its message is withheld: it may quote record values)"


def first_line(error: BaseException) -> str:
    """The first line of an error about an expression's *text* or a table's *schema* (never
    its rows): polars appends its query plan to such messages."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
