"""Text normalisation for duplicate keys: Unicode NFC, whitespace folding, case folding.

The ARCV content-hash profile: "inconsequential whitespace can change an exact hash" —
the normalised rule catches what the exact content fingerprint cannot. Each step is a
switch in the campaign config (``[dedupe] nfc / fold_whitespace / fold_case``), and each
is a polars expression over a whole column.

NFC and case folding are Python's own (``unicodedata.normalize`` and ``str.casefold``,
one Unicode version, this Python's), applied per string in one elementwise batch
function: CPython's NFC returns a string that passes its quick check untouched, which
most key text does, so it costs ~8 µs per 1.9 K characters against ~60 µs for polars'
``str.normalize`` (which normalises every string in full), and the polars path used
another Unicode version than Python's case-folding table. Whitespace folding is a polars
regex over Python's whitespace (``str.split``'s, which the kinds' rules fold with).

Most key text needs no Python at all: a string made only of characters that NFC leaves
alone wherever they stand (starters that compose with nothing before them), whose case
folds are such characters too, is already in NFC and stays so once folded, and its case
folding is each character's ``casefold`` in turn. Such strings are folded by polars with
that per-character table (:func:`_fast_fold`, built over :data:`_FAST_DOMAIN`), the rest
by Python, so the result is Python's either way (a test proves the premise over every
code point and compares the two).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import polars as pl

from pipeline.core.config import DedupeSettings

__all__ = ["Normalisation"]

#: Whitespace as Python's ``str.isspace`` (and so ``str.split``, which the kinds' rules
#: fold texts with: :func:`pipeline.kinds.rules.folded`) knows it: the regex engine's
#: ``\s`` (Unicode's White_Space) and the information separators U+001C to U+001F.
#: With ``\s`` alone, ``a\x1cb`` and ``a b`` were one text to a rule and two to dedupe.
_SPACE: Final = r"[\s\x1c-\x1f]"
#: Every run of whitespace becomes one space, but a lone space, most of a text's
#: whitespace and already what it would become, is not matched at all: a run that
#: starts with a space and goes on, or one that starts with other whitespace. Same
#: result as ``" ".join(text.split())`` (a test compares them); measured 6x faster on
#: key texts than replacing every run.
_WHITESPACE_RUN: Final = rf" {_SPACE}+|[{_SPACE}&&[^ ]]{_SPACE}*"


@dataclass(frozen=True)
class Normalisation:
    """Which folds apply. Case folding is Python's ``str.casefold`` (full Unicode case
    folding: ``STRASSE`` and ``straße`` fold alike)."""

    nfc: bool = True
    fold_whitespace: bool = True
    fold_case: bool = True

    @classmethod
    def from_settings(cls, settings: DedupeSettings) -> Normalisation:
        return cls(settings.nfc, settings.fold_whitespace, settings.fold_case)

    def describe(self) -> str:
        steps = [
            name
            for name, on in (
                ("NFC", self.nfc),
                ("whitespace folding", self.fold_whitespace),
                ("case folding", self.fold_case),
            )
            if on
        ]
        return ", ".join(steps) if steps else "no normalisation"

    def text(self, expr: pl.Expr) -> pl.Expr:
        """Normalise a string expression."""
        if self.nfc or self.fold_case:
            switches = (self.nfc, self.fold_case)
            expr = expr.map_batches(
                lambda texts: _folded(texts, *switches), return_dtype=pl.String, is_elementwise=True
            )
        if self.fold_whitespace:
            expr = expr.str.replace_all(_WHITESPACE_RUN, " ").str.strip_chars(" ")
        return expr


#: strings folded per slice: a Python ``str`` of non-ASCII text takes 2 or 4 bytes a
#: character, so a whole column as Python strings (and their folded copies) took twice
#: the memory of the column itself and more
_SLICE: Final = 256

#: Code points the fast fold is built for ([start, end)): Latin, Greek, Cyrillic, Armenian,
#: Hebrew, Arabic, Syriac and Devanagari; Latin and Greek extended; punctuation, symbols,
#: arrows, Glagolitic, Coptic; CJK punctuation and kana; CJK ideographs; Hangul syllables;
#: fullwidth forms; emoji and pictographs. Building the table reads each once (~20 ms).
_FAST_DOMAIN: Final = (
    (0x0000, 0x0980),
    (0x1E00, 0x2E80),
    (0x3000, 0x3100),
    (0x4E00, 0xA000),
    (0xAC00, 0xD7A4),
    (0xFF00, 0xFFF0),
    (0x1F000, 0x1FB00),
)


@dataclass(frozen=True)
class _FastFold:
    """``unsafe``: a regex matching any character outside the proved set; ``source`` and
    ``target``: each proved character whose fold differs from it, and its fold."""

    unsafe: str
    source: list[str]
    target: list[str]


def _settled(char: str) -> bool:
    """Whether NFC leaves ``char`` alone wherever it stands: a starter (combining class 0)
    in NFC. Within :data:`_FAST_DOMAIN` no such character composes with one before it
    (a test reads every canonical decomposition), so a string of them is in NFC."""
    return unicodedata.combining(char) == 0 and unicodedata.normalize("NFC", char) == char


@functools.cache
def _fast_fold(nfc: bool, fold_case: bool) -> _FastFold:
    """The per-character table of the fold ``(nfc, fold_case)`` and the characters it is
    proved for: with NFC, settled characters whose case folds (when folding) are settled
    too, so NFC before and after changes nothing; without NFC, every character of the
    domain (``casefold`` reads no context)."""
    proved: list[int] = []
    source: list[str] = []
    target: list[str] = []
    for start, end in _FAST_DOMAIN:
        for code in range(start, end):
            char = chr(code)
            folded = char.casefold() if fold_case else char
            if nfc and not all(_settled(c) for c in {char, *folded}):
                continue
            proved.append(code)
            if folded != char:
                source.append(char)
                target.append(folded)
    runs: list[list[int]] = []
    for code in proved:
        if runs and runs[-1][1] == code - 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    allowed = "".join(f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in runs)
    return _FastFold(f"[^{allowed}]", source, target)


def _folded(texts: pl.Series, nfc: bool, fold_case: bool) -> pl.Series:
    """The fold ``(nfc, fold_case)`` of each string of ``texts`` (nulls stay null): by
    polars where :func:`_fast_fold` proves its table, by Python elsewhere."""
    fast = _fast_fold(nfc, fold_case)
    folded = texts.str.replace_many(fast.source, fast.target) if fast.source else texts
    slow = texts.str.contains(fast.unsafe).fill_null(False).arg_true()
    if len(slow) == 0:
        return folded
    fold = _FOLDS[nfc, fold_case]
    # scatter writes into its series: never into the caller's
    return folded.clone().scatter(slow, _python_folded(texts.gather(slow), fold))


def _python_folded(texts: pl.Series, fold: Callable[[str], str]) -> pl.Series:
    """``fold`` applied to each string of ``texts`` (none null), a slice at a time."""
    parts = [
        pl.Series(texts.name, [fold(t) for t in texts.slice(start, _SLICE).to_list()], pl.String)
        for start in range(0, len(texts), _SLICE)
    ]
    return pl.concat(parts) if parts else pl.Series(texts.name, [], pl.String)


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _nfc_casefold(text: str) -> str:
    # folding can decompose what NFC composed (U+01F0 folds to "j" + U+030C), so NFC again
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())


#: (nfc, fold_case) → the per-string fold
_FOLDS: Final[dict[tuple[bool, bool], Callable[[str], str]]] = {
    (True, True): _nfc_casefold,
    (True, False): _nfc,
    (False, True): str.casefold,
}
