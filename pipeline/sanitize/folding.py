"""Unicode spellings of a value that read the same as the ASCII the detectors look for.

A value can be written so that a person reads it unchanged while no pattern matches it:
fullwidth forms (``alice＠gmail.com``, ``２０２-５５５-０１４３``), digits of another script
(``٢٠٢٥٥٥٠١٤٣``), a dash other than '-', an ideographic full stop as a domain's dot
(``alice@gmail。com``: IDNA reads it as one), or an invisible character inside it (a
zero-width space, a soft hyphen) or an accent (``jose\u0301@gmail.com``,
``202\u0301-555-0143``). The detectors therefore also read a *folded view* of such a
text: each character NFKC-normalised on its own, then every decimal digit as its ASCII
digit, every dash as '-', every ideographic full stop as '.', and the default-ignorable
characters dropped; where a combining diacritic (the five Combining Diacritical Marks
blocks) stands inside a value (beside a digit, or in an address: before its '@' in the
local part, or after it in the domain), every such diacritic of the text is dropped too.
Other marks stay (in Devanagari or Arabic they are letters of words), and a text whose
diacritics stand in no value is not folded for them.

Each character of the view comes from one character of the text, so a detection in the
view maps back to whole characters of the text (a span ending inside what one character
folded into covers all of it): redaction replaces what was written, never part of it.

Most text never pays for this: ASCII text is never folded (``str.isascii`` reads a flag),
other text only when a few regex searches or the NFKC quick check find a character the
fold changes; the view is made by ``str.translate`` over a cached table, and the map
back is built only when the view holds a detection.
"""

from __future__ import annotations

import re
import unicodedata
from array import array
from collections.abc import Iterable
from typing import Final

__all__ = ["FoldedText", "fold", "fold_name"]

# Default_Ignorable_Code_Point (Unicode DerivedCoreProperties): format controls, joiners,
# variation selectors, fillers and tags. Invisible wherever they stand.
_IGNORABLE: Final = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
# Every dash punctuation character (general category Pd) but '-', and the minus sign.
_DASHES: Final = (
    "\u058a\u05be\u1400\u1806\u2010-\u2015\u2e17\u2e1a\u2e3a\u2e3b\u2e40\u2e5d\u301c"
    "\u3030\u30a0\ufe31\ufe32\ufe58\ufe63\uff0d\U00010ead\u2212"
)
# The Combining Diacritical Marks blocks (and their Extended, Supplement, for Symbols and
# Half Marks blocks): accents a Latin, Greek or Cyrillic value can carry without reading
# otherwise. Marks of other scripts (Devanagari's vowel signs, Arabic's harakat) are
# letters of their words and are never dropped.
_DIACRITICS: Final = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
# Full stops IDNA maps to '.' in a domain (U+FF0E and U+FF61 are NFKC's too; U+3002 not).
_IDEOGRAPHIC_STOP: Final = "\u3002"
_IGNORABLE_CHAR: Final = re.compile(f"[{_IGNORABLE}]")
_DIACRITIC_CHAR: Final = re.compile(f"[{_DIACRITICS}]")
# A diacritic inside a value: beside a digit (the leading class lets the search skip to
# a digit or a diacritic), or in an address (the local part's last one before '@', the
# domain's first after it). Only then are diacritics dropped.
_DIACRITIC_BY_DIGIT: Final = re.compile(
    f"[\\d{_DIACRITICS}](?:(?<=\\d)[{_DIACRITICS}]|(?<=[{_DIACRITICS}])\\d)"
)
_DIACRITIC_IN_ADDRESS: Final = re.compile(f"[{_DIACRITICS}][\\w.+-]*+@|@[\\w.-]*+[{_DIACRITICS}]")
# An ideographic full stop in a domain: after '@' and a label. Elsewhere (a Japanese or
# Chinese sentence's end) it makes no value, and text holding it is not folded for it.
_STOP_IN_DOMAIN: Final = re.compile(f"@[\\w.-]+{_IDEOGRAPHIC_STOP}")
_DASH_CHAR: Final = re.compile(f"[{_DASHES}]")
# What NFKC leaves as it is but the fold changes, where it can make a value: non-ASCII
# decimal digits, ignorables, and a dash beside a digit (a dash elsewhere, as prose
# writes an em dash, joins no number: folding every text holding one doubled the cost of
# sanitizing most model output). What NFKC changes, unicodedata.is_normalized finds.
_HINT: Final = re.compile(f"[^\\D0-9]|[{_IGNORABLE}]|\\d[{_DASHES}]|[{_DASHES}]\\d")
_NON_ASCII: Final = re.compile(r"[^\x00-\x7f]+")
#: Distinct characters whose fold is kept (a text can hold any of ~290,000; past this
#: many the rest are folded again each time they occur).
_TABLE_LIMIT: Final = 65536


def _fold_char(char: str, bare: bool) -> str:
    folded = []
    for c in unicodedata.normalize("NFKC", char):
        if _IGNORABLE_CHAR.match(c) or (bare and _DIACRITIC_CHAR.match(c)):
            continue
        digit = unicodedata.decimal(c, None)
        if digit is not None:
            folded.append(str(digit))
        elif _DASH_CHAR.match(c):
            folded.append("-")
        elif c == _IDEOGRAPHIC_STOP:
            folded.append(".")
        else:
            folded.append(c)
    return "".join(folded)


class _FoldTable(dict[int, str]):
    """``str.translate`` table computing a character's fold the first time it is seen;
    a ``bare`` one drops the combining diacritics too."""

    def __init__(self, bare: bool) -> None:
        super().__init__({code: chr(code) for code in range(128)})
        self.bare = bare

    def __missing__(self, code: int) -> str:
        folded = _fold_char(chr(code), self.bare)
        if len(self) < _TABLE_LIMIT:
            self[code] = folded
        return folded


_TABLE: Final = _FoldTable(bare=False)
_BARE: Final = _FoldTable(bare=True)


class FoldedText:
    """The folded view of ``original``; :meth:`to_original` maps its spans back."""

    __slots__ = ("_origin", "_table", "original", "text")

    def __init__(self, original: str, text: str, table: _FoldTable = _TABLE) -> None:
        self.original = original
        self.text = text
        self._table = table
        self._origin: array[int] | None = None

    def origin(self) -> array[int]:
        """For each character of the view, the index of the character it came from."""
        if self._origin is None:
            origin = array("I")
            position = 0
            for run in _NON_ASCII.finditer(self.original):
                origin.extend(range(position, run.start()))
                for index in range(run.start(), run.end()):
                    origin.extend([index] * len(self._table[ord(self.original[index])]))
                position = run.end()
            origin.extend(range(position, len(self.original)))
            self._origin = origin
        return self._origin

    def to_original(self, spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        """View spans ``[start, end)`` as spans of whole characters of the original."""
        origin = self.origin()
        return [(origin[start], origin[end - 1] + 1) for start, end in spans]


def fold(text: str) -> FoldedText | None:
    """The folded view of ``text``, or None when folding changes nothing."""
    if text.isascii():
        return None
    bare = _DIACRITIC_CHAR.search(text) is not None and (
        _DIACRITIC_BY_DIGIT.search(text) is not None
        or ("@" in text and _DIACRITIC_IN_ADDRESS.search(text) is not None)
    )
    if (
        not bare
        and _HINT.search(text) is None
        and (_IDEOGRAPHIC_STOP not in text or _STOP_IN_DOMAIN.search(text) is None)
        and unicodedata.is_normalized("NFKC", text)
    ):
        return None
    table = _BARE if bare else _TABLE
    folded = text.translate(table)
    return None if folded == text else FoldedText(text, folded, table)


def fold_name(name: str) -> str:
    """A member or variable name as it reads (``ｐａｓｓ\\u200bword`` → ``password``)."""
    return name if name.isascii() else name.translate(_TABLE)
