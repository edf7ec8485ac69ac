"""Text detectors: bounded candidate patterns first, then parser-backed validation.

Seed 002: "Use bounded patterns and parser-backed validation. Regexes are candidate
detectors; they cannot establish a universal zero-PII guarantee." Each detector finds
candidates with a regular expression and keeps only those a real parser or checksum
accepts (``phonenumbers``, :mod:`ipaddress`, IDNA, the SSN exclusions, the CPF and
DNI/NIE check digits).

Detectors read UTF-8 *bytes* (a record's scanned strings joined with a separator no
pattern can cross): byte patterns run two to three times faster than the same patterns
over ``str``, ``bytes.lower`` keeps offsets, and cheap substring checks skip detectors
that cannot match. Email addresses are the exception: internationalised local parts and
domains need Unicode word characters, so they are found on ``str``, and only in texts
holding an ``@``.

Every pattern was reviewed for catastrophic backtracking: no quantified group contains a
quantifier over a class that overlaps what follows it, repetitions that could
re-partition the same text are possessive (``++``, ``{m,n}+``, Python 3.11) or bounded,
and boundaries are checked in Python on the match rather than with look-behinds that
would defeat the engine's prefix search. ``tests/sanitize/test_sanitize_detectors.py`` runs every
detector over adversarial inputs of a few hundred kilobytes under a generous time bound.

A :class:`Detection` is *certain* when validation accepted it; it is *uncertain* when
the text around it says what it is ("SSN:", "phone") but validation refused it (a
typo'd real number is still personal data): it is redacted all the same and the record
goes to quarantine, never to an invented clean result.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from encodings import idna
from functools import lru_cache
from itertools import accumulate
from typing import Final

import phonenumbers

from pipeline.sanitize.categories import TAG_PATTERN, Category
from pipeline.sanitize.folding import FoldedText, fold, fold_name

__all__ = [
    "MIN_TEXT",
    "PARSE_BUDGET",
    "SEPARATOR",
    "Detection",
    "SecretNames",
    "TextScanner",
    "is_placeholder",
    "valid_cpf",
    "valid_dni",
    "valid_ssn",
]

#: No detector can match a shorter text (the shortest, an address like ``a@b.co``).
MIN_TEXT: Final = 6
#: Joins the scanned strings of one record. Every pattern stops at a newline or NUL,
#: so no detection spans two strings.
SEPARATOR: Final = b"\n\x00\n"


@dataclass(frozen=True, slots=True)
class Detection:
    """A span ``[start, end)`` of ``category``; never holds the matched text itself."""

    start: int
    end: int
    category: Category
    certain: bool = True


# -- shared helpers ------------------------------------------------------------------


def _char_before(data: bytes, start: int) -> str:
    """The character ending at byte ``start`` ("" at the start or after a separator)."""
    if start <= 0:
        return ""
    begin = start - 1
    while begin > 0 and start - begin < 4 and 0x80 <= data[begin] < 0xC0:
        begin -= 1
    return data[begin:start].decode("utf-8", "replace")[-1:]


def _char_after(data: bytes, end: int) -> str:
    """The character starting at byte ``end`` ("" at the end)."""
    if end >= len(data):
        return ""
    first = data[end]
    width = 1 if first < 0x80 else 2 if first < 0xE0 else 3 if first < 0xF0 else 4
    return data[end : end + width].decode("utf-8", "replace")[:1]


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


# Underscores glue a value to a word only when a letter or digit lies beyond them
# ("task_2025550143"); alone they are Markdown emphasis ("_202-555-0143_", "__x__"). Each
# run of underscores is walked only by the candidates touching it: linear in all.


def _word_before(data: bytes, start: int) -> bool:
    """Whether a word touches byte ``start`` from the left (see above)."""
    while start > 0 and data[start - 1] == 0x5F:
        start -= 1
    return _char_before(data, start).isalnum()


def _word_after(data: bytes, end: int) -> bool:
    """Whether a word touches byte ``end`` from the right (see above)."""
    while end < len(data) and data[end] == 0x5F:
        end += 1
    return _char_after(data, end).isalnum()


def _context(data: bytes, lower: bytes, start: int, words: re.Pattern[bytes]) -> bool:
    """Whether one of ``words`` occurs in the 32 bytes before ``start``, within the
    same string (the window stops at a separator)."""
    begin = max(0, start - 32)
    cut = lower.rfind(b"\x00", begin, start)
    return words.search(lower, cut + 1 if cut >= 0 else begin, start) is not None


_PLACEHOLDER: Final = re.compile(
    r"[\s*xX•.\-_#]*"  # masks: "", "****", "xxxx-xxxx", "•••"
    r"|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?"  # an environment reference: $TOKEN, ${API_KEY}
    r"|\{\{[^{}]*\}\}|<[^<>]*>"  # a template slot: {{ token }}, <your key>
)


def is_placeholder(value: str) -> bool:
    """A value that stands for a secret without being one (a mask, a reference, a tag).

    Redacting these would hide nothing a person could misuse, and a value that is
    already only canonical tags must stay as it is for the sanitizer to be idempotent.
    """
    if _PLACEHOLDER.fullmatch(value) is not None:
        return True
    return not TAG_PATTERN.sub("", value).strip()


class SecretNames:
    """Field and variable names whose values are secrets (``api_key``, ``githubToken``).

    A name is secret when, normalised (camelCase and ``-``/``.``/space split into ``_``,
    lower case), it equals a configured name or ends with ``_`` + one: ``github_token``
    and ``X-Api-Key`` are, ``max_tokens``, ``token_type`` and ``tokenizer`` are not.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(sorted({normalise_name(n) for n in names}))
        exact = frozenset(self.names)
        suffixes = tuple("_" + n for n in self.names)

        @lru_cache(maxsize=4096)
        def is_secret(name: str) -> bool:
            normal = normalise_name(name)
            return normal in exact or normal.endswith(suffixes)

        self.is_secret: Callable[[str], bool] = is_secret
        # An identifier can only be secret if it ends with the last segment of a name,
        # so those segments are the words searched for in free text (lower case); one
        # that ends with another ("apikey", "key") is found through the shorter one.
        ends = {n.rsplit("_", 1)[-1].encode() for n in self.names} - {b""}  # found at every byte
        self.triggers = tuple(
            sorted(e for e in ends if not any(e != o and e.endswith(o) for o in ends))
        )


_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NAME_SEPARATORS: Final = re.compile(r"[-.\s]+")


def normalise_name(name: str) -> str:
    """``X-Api-Key`` → ``x_api_key``, ``githubToken`` → ``github_token``; read folded
    (``ｐａｓｓ\u200bword`` → ``password``)."""
    return _NAME_SEPARATORS.sub("_", _CAMEL.sub("_", fold_name(name).strip())).lower()


# -- email (on str) --------------------------------------------------------------------

# The local part: word characters (Unicode, so internationalised RFC 6531 addresses
# match), dots, plus and hyphen; at most 64, possessive. The look-behind starts a
# candidate only where such a run starts, so a long run without '@' costs one bounded
# attempt. The domain: at most 127 labels of at most 63 characters, literal dots.
_EMAIL: Final = re.compile(
    r"(?<![\w.+-])[\w.+-]{1,64}+@(?P<domain>[\w-]{1,63}+(?:\.[\w-]{1,63}+){1,126}+)"
)
_RETINA: Final = re.compile(r"\d+(?:\.\d+)?x\.", re.ASCII)


def _valid_tld(label: str) -> bool:
    return len(label) >= 2 and (label.isalpha() or label.lower().startswith("xn--"))


def _valid_domain(labels: list[str]) -> bool:
    if len(labels) < 2 or not _valid_tld(labels[-1]):
        return False
    if not all(label[0] not in "-_" and label[-1] not in "-_" for label in labels):
        return False
    try:
        encoded = [idna.ToASCII(label) for label in labels]
    except UnicodeError:
        return False
    return sum(len(e) + 1 for e in encoded) <= 254


def _domain_labels(matched: str) -> list[str] | None:
    """The labels of the domain an address ends with, read from what the pattern
    matched after its '@' (None: no domain).

    No host name may hold '_', but mail domains in exports do ("a@foo_bar.com"): inside
    a label it is kept. A top-level label never holds one: "a@b.com_" (Markdown
    emphasis) and "a@b.com_x" end at "com". Where the underscores read as part of the
    domain give none, the domain ends at the first one, as host names would.
    """
    for read in (matched, matched.split("_", 1)[0]) if "_" in matched else (matched,):
        labels = read.split(".")
        # Trailing labels that cannot end a domain (a version, a file name) are cut off:
        # "a@example.com.1" still holds a@example.com.
        while len(labels) > 2 and not _valid_tld(labels[-1].split("_", 1)[0]):
            labels.pop()
        labels[-1] = labels[-1].split("_", 1)[0]
        if _valid_domain(labels):
            return labels
    return None


def emails(text: str) -> Iterator[Detection]:
    """Email addresses in ``text`` (``str`` offsets)."""
    for match in _EMAIL.finditer(text):
        labels = _domain_labels(match.group("domain"))
        if labels is None:
            continue
        domain = ".".join(labels)
        end = match.start("domain") + len(domain)
        start = match.start()
        lead = match.start("domain") - 1 - start
        lead -= len(text[start : start + lead].lstrip("_"))
        if lead and text.startswith("_" * lead, end):
            start += lead  # "_a@b.com_": the underscores are emphasis, not the address
        local = text[start : match.start("domain") - 1]
        if not local or local[0] == "." or local[-1] == "." or ".." in local:
            continue
        if _RETINA.match(domain):
            continue  # "icon@2x.png" is an asset name
        if end < len(text) and (text[end].isalnum() or text[end] == "-"):
            continue
        yield Detection(start, end, Category.EMAIL)


# -- phone numbers ---------------------------------------------------------------------

# A maximal run of digits and the characters phone numbers are written with: one class,
# greedy, no nesting (linear). Runs are cut into chunks in Python: at whitespace, before a
# '(' and after a ')', so a number a parenthesis glues to other digits ("9522(202",
# "202)415-555-9522") is still tried on its own. A '(' only opens a chunk and a ')' only
# closes one; chunks joined back are the run's text, so no number written whole is lost.
_PHONE_RUN: Final = re.compile(rb"[+(0-9][0-9 ().\-\t]{6,}")
_CHUNK: Final = re.compile(rb"\(?[^ \t()]*\)?")
_TWO_DIGITS: Final = re.compile(rb"00")
_RUN_BYTES: Final = frozenset(b"0123456789 ().-\t+")
_RUN_STARTS: Final = frozenset(b"0123456789+(")
_DOTTED_QUAD: Final = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}", re.ASCII)
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}[.\-]\d{2}[.\-]\d{4}", re.ASCII)
_PHONE_WORDS: Final = re.compile(
    rb"\b(?:phone|tel|telephone|mobile|cell|call|fax|whatsapp|sms|contact)\b"
)
#: A phone number is written in at most this many space-separated groups
#: ("+33 1 42 68 53 00"; "+33 (0)1 42 68 53 00" too: "(0)1" is one group of two chunks).
_MAX_GROUPS: Final = 6
#: ``phonenumbers.parse`` calls allowed per scan; past it every remaining candidate is
#: redacted as an uncertain phone number (quarantine) rather than left unchecked.
PARSE_BUDGET: Final = 256


def _digits(data: bytes) -> int:
    return len(data) - len(data.translate(None, b"0123456789"))


@lru_cache(maxsize=65536)
def _valid_phone(candidate: str, regions: tuple[str, ...]) -> bool:
    """``phonenumbers`` validation (cached: exports repeat the same numbers)."""
    if _DOTTED_QUAD.fullmatch(candidate) or _DATE.fullmatch(candidate):
        return False
    for region in (None,) if candidate[0] == "+" else regions:
        try:
            number = phonenumbers.parse(candidate, region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            return True
    return False


class _PhoneValidator:
    def __init__(self, regions: tuple[str, ...], taken: list[tuple[int, int]]) -> None:
        self.regions = regions
        self.taken = taken
        self.calls = 0

    def valid(self, start: int, end: int, candidate: str) -> bool:
        # A span another detector already claimed (an SSN, a CPF) is redacted anyway,
        # with a higher priority: no need to ask phonenumbers about it.
        if any(s <= start and end <= e for s, e in self.taken):
            return False
        self.calls += 1
        return _valid_phone(candidate, self.regions)


def _phone_runs(data: bytes, shape: bytes) -> Iterator[re.Match[bytes]]:
    """Maximal runs of phone characters holding two adjacent digits (every phone number
    of seven or more digits in at most six groups has such a pair)."""
    resume = 0
    for pair in _TWO_DIGITS.finditer(shape):
        if pair.start() < resume:
            continue
        begin = pair.start()
        while begin > resume and data[begin - 1] in _RUN_BYTES:
            begin -= 1
            if data[begin] == ord("+"):  # a '+' can only start a number ("(+1 …", "+1 +1 …")
                break
        while data[begin] not in _RUN_STARTS:  # a run starts with a digit, '+' or '('
            begin += 1
        run = _PHONE_RUN.match(data, begin)
        if run is None:
            resume = pair.end()
            continue
        resume = run.end()
        yield run


def _phones(
    data: bytes,
    lower: bytes,
    shape: bytes,
    regions: tuple[str, ...],
    taken: list[tuple[int, int]],
) -> Iterator[Detection]:
    validator = _PhoneValidator(regions, taken)
    for run in _phone_runs(data, shape):
        offset = run.start()
        glued = _glued_left(data, offset)
        if glued and b" " not in run.group() and b"\t" not in run.group():
            continue  # one chunk, glued to a word: an identifier ("task-0001234")
        chunks = [
            (m.start() + offset, m.end() + offset)
            for m in _CHUNK.finditer(run.group())
            if m.end() > m.start()
        ]
        digits = [_digits(data[s:e]) for s, e in chunks]
        groups = list(
            accumulate(int(k > 0 and data[s - 1] in b" \t") for k, (s, _) in enumerate(chunks))
        )
        if sum(digits) < 7:
            continue
        # A run glued to a word ("task-2025550143", "2025550143x", "#2025550143") is an
        # identifier, not a number someone would dial.
        first = 1 if glued else 0
        last = len(chunks) - 1
        # Only a digit touching the next word glues the last chunk to it ("2025550143x");
        # "9522(" followed by a word ends at its own delimiter.
        glued_right = data[run.end() - 1 : run.end()].isdigit()
        if chunks[-1][1] == run.end() and glued_right and _word_after(data, run.end()):
            last -= 1
        found = False
        i = first
        while i <= last:
            if validator.calls >= PARSE_BUDGET:
                yield from _uncertain_phones(data, chunks[i : last + 1])
                found = True
                break
            j = _longest_valid(data, chunks, digits, groups, i, last, validator)
            if j is None:
                i += 1
                continue
            start, end = _trim_phone(data, chunks[i][0], chunks[j][1])
            yield Detection(start, end, Category.PHONE)
            found = True
            i = j + 1
        if not found and not first and _context(data, lower, offset, _PHONE_WORDS):
            start, end = _trim_phone(data, offset, run.end())
            candidate = data[start:end].decode()
            if 7 <= _digits(data[start:end]) <= 15 and not _DOTTED_QUAD.fullmatch(candidate):
                yield Detection(start, end, Category.PHONE, certain=False)


def _glued_left(data: bytes, start: int) -> bool:
    previous = _char_before(data, start)
    if not previous:
        return False
    if _word_before(data, start) or previous == "#":  # "#2025550143" is a reference number
        return True
    return previous in "-./@" and _word_before(data, start - 1)


def _longest_valid(
    data: bytes,
    chunks: list[tuple[int, int]],
    digits: list[int],
    groups: list[int],
    i: int,
    last: int,
    validator: _PhoneValidator,
) -> int | None:
    """The last chunk of the longest valid number that starts at chunk ``i`` and spans
    at most ``_MAX_GROUPS`` whitespace-separated groups (``groups``: each chunk's)."""
    top = i
    while top < last and groups[top + 1] - groups[i] < _MAX_GROUPS:
        top += 1
    total = sum(digits[i : top + 1])
    for j in range(top, i - 1, -1):
        if 7 <= total <= 15:
            start, end = _trim_phone(data, chunks[i][0], chunks[j][1])
            if validator.valid(start, end, data[start:end].decode()):
                return j
            if validator.calls >= PARSE_BUDGET:
                return None
        total -= digits[j]
    return None


def _trim_phone(data: bytes, start: int, end: int) -> tuple[int, int]:
    """Drop separators at the ends of a span; keep an opening '(' or '+' that is used."""
    while end > start and data[end - 1] not in b"0123456789)":
        end -= 1
    if end > start and data[end - 1] == ord(")") and b"(" not in data[start:end]:
        end -= 1
    while start < end and data[start] not in b"+(0123456789":
        start += 1
    return start, end


def _uncertain_phones(data: bytes, chunks: list[tuple[int, int]]) -> Iterator[Detection]:
    for start, end in chunks:
        s, e = _trim_phone(data, start, end)
        if _digits(data[s:e]) >= 3:
            yield Detection(s, e, Category.PHONE, certain=False)


# -- IP addresses ----------------------------------------------------------------------

_IPV4: Final = re.compile(rb"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}")
_VERSION_BEFORE: Final = re.compile(
    rb"(?:\bversion|\bver|\brelease|\bbuild|==|>=|<=|~=|!=|@)[ \t:]*\Z"
)
# Hex groups and colons, optionally ending in a dotted quad (::ffff:192.0.2.1). Groups
# are bounded and separated by a literal colon; the repetitions are possessive.
_IPV6: Final = re.compile(
    rb"(?:[0-9A-Fa-f]{1,4}|(?=::))(?::[0-9A-Fa-f]{0,4}){2,7}+(?:\.[0-9]{1,3}){0,3}+"
)
# Every IPv6 literal holds ":" + at most four hex digits + ":"; the full pattern runs
# only around those (the hint starts with a literal, which the engine finds fast).
_IPV6_HINT: Final = re.compile(rb":[0-9A-Fa-f]{0,4}:")


def ipv4_spans(data: bytes, lower: bytes) -> Iterator[tuple[int, int]]:
    """Dotted quads that :class:`ipaddress.IPv4Address` accepts, not versions."""
    for match in _IPV4.finditer(data):
        start, end = match.span()
        previous, following = _char_before(data, start), _char_after(data, end)
        if _word_before(data, start) or previous == ".":
            continue
        if _word_after(data, end) or (following == "." and _char_after(data, end + 1).isdigit()):
            continue
        if _VERSION_BEFORE.search(lower, max(0, start - 16), start):
            continue  # "version 1.2.3.4", "pkg==1.2.3.4": a version, not an address
        try:
            ipaddress.IPv4Address(match.group().decode())
        except ValueError:  # out of range, leading zeros
            continue
        yield start, end


def ipv6_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """IPv6 literals that :class:`ipaddress.IPv6Address` accepts."""
    resume = 0
    for hint in _IPV6_HINT.finditer(data):
        if hint.start() < resume:
            continue
        # Back up to where the literal could start (at most one group and a colon).
        begin = max(resume, hint.start() - 5)
        match = _IPV6.search(data, begin, min(len(data), hint.end() + 45))
        while match is not None and match.start() <= hint.start():
            start, end = match.span()
            resume = end
            if _ipv6_ok(data, start, end):
                yield start, end
                break
            match = _IPV6.search(data, end, min(len(data), hint.end() + 45))


def _ipv6_ok(data: bytes, start: int, end: int) -> bool:
    previous, following = _char_before(data, start), _char_after(data, end)
    if _word_before(data, start) or previous in (":", "."):
        return False
    if _word_after(data, end) or following == ":":
        return False
    candidate = data[start:end].decode()
    # Slices (x[1::2]) and scope operators are shaped like short IPv6 literals; a real
    # address has three colons or a full four-digit group.
    if candidate.count(":") < 3 and not any(len(g) == 4 for g in re.split(r"[:.]", candidate)):
        return False
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    return True


# -- national identifiers --------------------------------------------------------------

_SSN: Final = re.compile(rb"[0-9]{3}-[0-9]{2}-[0-9]{4}")
_SSN_WORDS: Final = re.compile(rb"\b(?:ssn|ss#|social[ \t]+security)")
# "SSN: 123456789", "social security number 123 45 6789": only after those words. What
# stands between them is no letter or digit; underscores may (Markdown emphasis: "SSN
# _123456789_"), and _delimited still keeps "ssn_123456789" an identifier.
_SSN_CONTEXT: Final = re.compile(
    rb"\b(?:ssn|social[ \t]+security(?:[ \t]+(?:number|no\.?|#))?)[^0-9A-Za-z\n\x00]{0,12}+"
    rb"(?P<id>[0-9]{3}[ \t]?[0-9]{2}[ \t]?[0-9]{4})"
)
_CPF: Final = re.compile(rb"[0-9]{3}\.[0-9]{3}\.[0-9]{3}-[0-9]{2}")
_CPF_CONTEXT: Final = re.compile(rb"\bcpf\b[^0-9A-Za-z\n\x00]{0,12}+(?P<id>[0-9]{11})")
_CPF_WORDS: Final = re.compile(rb"\bcpf\b")
_DNI: Final = re.compile(rb"(?:[XYZ]-?[0-9]{7}|[0-9]{8})-?[A-Z]")
_DNI_WORDS: Final = re.compile(rb"\b(?:dni|nie|nif|documento)\b")
_DNI_LETTERS: Final = "TRWAGMYFPDXBNJZSQVHLCKE"
# The shape (digits as '0') of a DNI or NIE: 7 or 8 digits, maybe a hyphen, a letter.
_DNI_SHAPE: Final = re.compile(rb"0000000(?:0|-)?[A-Z]")


def valid_ssn(digits: str) -> bool:
    """A US SSN that could have been issued: area not 000, 666 or 900-999; group not
    00; serial not 0000 (the SSA's published exclusions)."""
    if len(digits) != 9 or not digits.isascii() or not digits.isdigit():
        return False
    area, group, serial = int(digits[:3]), digits[3:5], digits[5:]
    return area not in (0, 666) and area < 900 and group != "00" and serial != "0000"


def valid_cpf(digits: str) -> bool:
    """A Brazilian CPF: two mod-11 check digits; all-equal digits are never issued."""
    if len(digits) != 11 or not digits.isascii() or not digits.isdigit():
        return False
    if len(set(digits)) == 1:
        return False
    numbers = [int(d) for d in digits]
    for length in (9, 10):
        weights = range(length + 1, 1, -1)
        total = sum(n * w for n, w in zip(numbers[:length], weights, strict=True))
        if total * 10 % 11 % 10 != numbers[length]:
            return False
    return True


def valid_dni(value: str) -> bool:
    """A Spanish DNI (8 digits + letter) or NIE (X/Y/Z + 7 digits + letter): the letter
    is the number mod 23 in ``TRWAGMYFPDXBNJZSQVHLCKE``."""
    value = value.replace("-", "")
    if len(value) != 9:
        return False
    head = value[:-1]
    if head[0] in "XYZ":
        head = str("XYZ".index(head[0])) + head[1:]
    if not head.isascii() or not head.isdigit():
        return False
    return _DNI_LETTERS[int(head) % 23] == value[-1]


def _delimited(data: bytes, start: int, end: int) -> bool:
    previous, following = _char_before(data, start), _char_after(data, end)
    if _word_before(data, start) or previous in ("-", "."):
        return False
    if _word_after(data, end):
        return False
    return not (following in ("-", ".") and _char_after(data, end + 1).isdigit())


def _national_ids(data: bytes, lower: bytes, shape: bytes) -> Iterator[Detection]:
    if b"00-00-0000" in shape:
        for match in _SSN.finditer(data):
            start, end = match.span()
            if not _delimited(data, start, end):
                continue
            if valid_ssn(match.group().decode().replace("-", "")):
                yield Detection(start, end, Category.NATIONAL_ID)
            elif _context(data, lower, start, _SSN_WORDS):
                yield Detection(start, end, Category.NATIONAL_ID, certain=False)
    if b"ssn" in lower or b"social" in lower:
        for match in _SSN_CONTEXT.finditer(lower):
            start, end = match.span("id")
            if _delimited(data, start, end):
                digits = match.group("id").decode().replace(" ", "").replace("\t", "")
                yield Detection(start, end, Category.NATIONAL_ID, certain=valid_ssn(digits))
    if b"000.000.000-00" in shape:
        for match in _CPF.finditer(data):
            start, end = match.span()
            if not _delimited(data, start, end):
                continue
            if valid_cpf(match.group().decode().replace(".", "").replace("-", "")):
                yield Detection(start, end, Category.NATIONAL_ID)
            elif _context(data, lower, start, _CPF_WORDS):
                yield Detection(start, end, Category.NATIONAL_ID, certain=False)
    if b"cpf" in lower:
        for match in _CPF_CONTEXT.finditer(lower):
            start, end = match.span("id")
            if _delimited(data, start, end):
                certain = valid_cpf(match.group("id").decode())
                yield Detection(start, end, Category.NATIONAL_ID, certain=certain)
    for run in _DNI_SHAPE.finditer(shape):
        # A DNI is 8 digits and a letter; a NIE is X, Y or Z, 7 digits and a letter.
        begin = run.start() - (2 if run.start() >= 2 and data[run.start() - 1] == 45 else 1)
        dni = _DNI.search(data, max(0, begin), min(len(data), run.end() + 2))
        if dni is None:
            continue
        start, end = dni.span()
        if _word_before(data, start) or _word_after(data, end):
            continue
        if valid_dni(dni.group().decode()):
            yield Detection(start, end, Category.NATIONAL_ID)
        elif _context(data, lower, start, _DNI_WORDS):
            yield Detection(start, end, Category.NATIONAL_ID, certain=False)


# -- API keys --------------------------------------------------------------------------

# Prefix families. Each pattern starts with a literal, so the engine's prefix search
# jumps between candidates (as fast as a substring check); the bodies are single
# classes (linear).
_API_KEYS: Final = (
    re.compile(rb"sk-(?P<sk>[A-Za-z0-9_-]{20,}+)"),  # OpenAI (sk-, sk-proj-), Anthropic
    re.compile(rb"sk_(?:live|test)_[A-Za-z0-9]{16,}+"),  # Stripe secret keys
    re.compile(rb"rk_(?:live|test)_[A-Za-z0-9]{16,}+"),  # Stripe restricted keys
    re.compile(rb"gh[pousr]_[A-Za-z0-9]{36,}+"),  # GitHub tokens
    re.compile(rb"github_pat_[A-Za-z0-9_]{22,}+"),  # GitHub fine-grained tokens
    re.compile(rb"glpat-[A-Za-z0-9_-]{20,}+"),  # GitLab personal access tokens
    re.compile(rb"xox[abposr]-[A-Za-z0-9-]{10,}+"),  # Slack tokens
    re.compile(rb"AIza[0-9A-Za-z_-]{35}"),  # Google API keys
    re.compile(rb"A(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|PKA|ROA)[A-Z0-9]{16}"),  # AWS key ids
)
_KEY_BYTES: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _api_keys(data: bytes) -> Iterator[Detection]:
    for pattern in _API_KEYS:
        for match in pattern.finditer(data):
            start, end = match.span()
            if start > 0 and data[start - 1] in _KEY_BYTES:
                continue  # inside a longer identifier ("task-sk-…", "mask_live_…")
            if end < len(data) and data[end] in _KEY_BYTES:
                continue
            body = match.groupdict().get("sk")
            # A kebab-case slug ("sk-learn-pipeline-cookbook") is not a key: keys are
            # random and, at 20+ characters, hold digits with near certainty.
            if body is not None and not any(c in b"0123456789" for c in body):
                continue
            yield Detection(start, end, Category.API_KEY)


# After a secret name: "= 'value'", ": \"value\"", "=value", ": value" (header line).
_ASSIGNMENT: Final = re.compile(
    rb"[\"']?[ \t]{0,8}+(?P<sep>=>|:=|[:=])[ \t]{0,8}+"
    rb"(?:(?P<q>[\"'`])(?P<quoted>[^\"'`\s\\\x00]{1,512}+)(?P=q)"
    rb"|(?P<bare>[^\s\"'`,;&)\]}<>\x00]{6,512}+))"
)
_IDENTIFIER_BYTES: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."
)


def _assignments(data: bytes, lower: bytes, names: SecretNames) -> Iterator[Detection]:
    for trigger in names.triggers:
        end = lower.find(trigger)
        while end >= 0:
            hit_start, end = end, end + len(trigger)
            detection = _assignment_at(data, hit_start, end, names)
            if detection is not None:
                yield detection
            end = lower.find(trigger, end)


def _assignment_at(data: bytes, hit: int, end: int, names: SecretNames) -> Detection | None:
    if end < len(data) and data[end] in _IDENTIFIER_BYTES:
        return None  # the identifier goes on: "tokenizer", "password_hash"
    value = _ASSIGNMENT.match(data, end)  # cheapest test first: most hits are prose
    if value is None:
        return None
    start = hit
    while start > 0 and data[start - 1] in _IDENTIFIER_BYTES and hit - start < 64:
        start -= 1
    if not names.is_secret(data[start:end].decode()):
        return None
    if value.group("quoted") is not None:
        span = value.span("quoted")
    else:
        # Unquoted values only where code rarely puts an expression: "NAME=value" (env
        # files, query strings, flags) or a "Name: value" header line; and only with a
        # digit in the value (identifiers like get_password() have none).
        span = value.span("bare")
        separator = value.group("sep")
        if separator == b"=":
            if value.start("sep") != end or value.end("sep") != span[0]:
                return None
        elif separator != b":" or not (start == 0 or data[start - 1] in b"\n\x00"):
            return None
        if not any(c in b"0123456789" for c in value.group("bare")):
            return None
    if is_placeholder(data[span[0] : span[1]].decode("utf-8", "replace")):
        return None
    return Detection(span[0], span[1], Category.API_KEY)


# -- bearer tokens ---------------------------------------------------------------------

_TOKEN: Final = rb"[A-Za-z0-9\-._~+/]{8,4096}+=*+"
_BEARER: Final = re.compile(rb"bearer[ \t]+(?P<token>" + _TOKEN + rb")")
_AUTHORIZATION: Final = re.compile(
    rb"authorization[\"']?[ \t]*+[:=][ \t]*+[\"']?(?:(?:basic|token|digest|bearer)[ \t]+)?"
    rb"(?P<token>" + _TOKEN + rb")"
)
# The look-behind (after the literal, so the prefix search still applies) starts a
# candidate only where a run starts: "eyJeyJeyJ…" must not be re-read from every "eyJ".
_JWT: Final = re.compile(
    rb"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"
)
_URL_CREDENTIAL: Final = re.compile(
    rb"://[^\s:/?#@\[\]\x00]{1,256}+:(?P<token>[^\s/?#@\[\]\x00]{1,256}+)@"
)


def _token_like(token: bytes) -> bool:
    """Random-looking: a digit or base64/URL punctuation, or mixed case.
    "Bearer authentication" is prose; "Bearer 4f9a…" and "Bearer AbCdEf…" are not."""
    if any(c in b"0123456789._~+/-=" for c in token):
        return True
    return not (token.islower() or token.isupper())


def _bearer_tokens(data: bytes, lower: bytes) -> Iterator[Detection]:
    # The patterns run on the lower-cased copy (same offsets) so "Bearer", "BEARER" and
    # "bearer" all match; the token's case is read from the original.
    if b"bearer" in lower:
        for match in _BEARER.finditer(lower):
            start, end = match.span("token")
            if not _is_word(_char_before(data, match.start())) and _token_like(data[start:end]):
                yield Detection(start, end, Category.BEARER_TOKEN)
    if b"authorization" in lower:
        for match in _AUTHORIZATION.finditer(lower):
            start, end = match.span("token")
            token = data[start:end]
            if _token_like(token) and not is_placeholder(token.decode()):
                yield Detection(start, end, Category.BEARER_TOKEN)
    if b"eyJ" in data:
        for match in _JWT.finditer(data):
            start, end = match.span()
            if not (start and data[start - 1] in _KEY_BYTES):
                yield Detection(start, end, Category.BEARER_TOKEN)
    if b"://" in data:
        for match in _URL_CREDENTIAL.finditer(data):
            start, end = match.span("token")
            if not is_placeholder(data[start:end].decode("utf-8", "replace")):
                yield Detection(start, end, Category.BEARER_TOKEN)


# -- the scanner -----------------------------------------------------------------------

# Every digit becomes '0': numeric shapes ("000-00-0000") become plain substring checks.
_SHAPE: Final = bytes.maketrans(b"123456789", b"000000000")


class TextScanner:
    """Runs the enabled detectors; substring checks skip those that cannot match."""

    def __init__(
        self,
        categories: frozenset[Category],
        phone_regions: tuple[str, ...],
        secret_names: SecretNames,
    ) -> None:
        self.categories = categories
        self.phone_regions = phone_regions
        self.secret_names = secret_names

    def scan_bytes(self, data: bytes) -> list[Detection]:
        """Detections of every category but email, in byte offsets of ``data``."""
        wanted = self.categories
        lower = data.lower()
        found: list[Detection] = []
        if Category.BEARER_TOKEN in wanted:
            found += _bearer_tokens(data, lower)
        if Category.API_KEY in wanted:
            found += _api_keys(data)
            found += _assignments(data, lower, self.secret_names)
        shape = data.translate(_SHAPE)
        if b"0" not in shape:
            return found
        if Category.NATIONAL_ID in wanted:
            found += _national_ids(data, lower, shape)
        if Category.IPV6 in wanted and b":" in data:
            found += (Detection(s, e, Category.IPV6) for s, e in ipv6_spans(data))
        if Category.IPV4 in wanted and b"0.0" in shape:
            found += (Detection(s, e, Category.IPV4) for s, e in ipv4_spans(data, lower))
        if Category.PHONE in wanted and b"00" in shape:
            taken = [(d.start, d.end) for d in found]
            found += _phones(data, lower, shape, self.phone_regions, taken)
        return found

    def scan(self, text: str) -> list[Detection]:
        """Every detection in one string, in ``str`` offsets: in the text as written and
        in its folded view (fullwidth forms, other digits, invisible characters: see
        :mod:`~pipeline.sanitize.folding`), mapped back to whole characters of the text.
        Both are read, so folding can only add detections."""
        found = self.scan_written(text)
        view = fold(text)
        if view is not None:
            found += self.scan_folded(view)
        return found

    def scan_folded(self, view: FoldedText) -> list[Detection]:
        """The detections in a folded view, in ``str`` offsets of its original."""
        return in_original(view, self.scan_written(view.text))

    def scan_written(self, text: str) -> list[Detection]:
        """The detections in ``text`` as written (no folded view), in ``str`` offsets."""
        if len(text) < MIN_TEXT:
            return []
        found = (
            [] if Category.EMAIL not in self.categories or "@" not in text else list(emails(text))
        )
        data = text.encode()
        detections = self.scan_bytes(data)
        if detections:
            found += to_str_offsets(data, detections)
        return found


def in_original(view: FoldedText, found: list[Detection]) -> list[Detection]:
    """Detections in a folded view, as spans of whole characters of its original."""
    if not found:
        return []
    spans = view.to_original((d.start, d.end) for d in found)
    return [Detection(s, e, d.category, d.certain) for (s, e), d in zip(spans, found, strict=True)]


def to_str_offsets(data: bytes, detections: list[Detection], base: int = 0) -> list[Detection]:
    """Re-express byte-offset detections (relative to ``data[base:]``) in ``str`` offsets.

    Only called when something was found, so the decoding cost is paid rarely.
    """
    if data.isascii():
        return [Detection(d.start - base, d.end - base, d.category, d.certain) for d in detections]
    cache: dict[int, int] = {}

    def char_offset(byte_offset: int) -> int:
        found = cache.get(byte_offset)
        if found is None:
            found = cache[byte_offset] = len(data[base:byte_offset].decode())
        return found

    return [
        Detection(char_offset(d.start), char_offset(d.end), d.category, d.certain)
        for d in detections
    ]
