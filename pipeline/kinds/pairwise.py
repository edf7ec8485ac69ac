"""pairwise-v2 (seed 000): a prompt, two candidate responses, a preference and ratings."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.kinds.base import RecordKind, register_kind
from pipeline.kinds.rules import (
    Finding,
    RuleContext,
    Severity,
    Spec,
    folded_heads_differ,
    is_blank,
    narrowed,
    record_rule,
    same_text,
    text_heads,
)
from pipeline.records.lineage import PAIRWISE_CONTENT_V1, ContentFingerprint

if TYPE_CHECKING:
    import polars as pl

    from pipeline.dedupe.keys import DedupeKey

#: Multi-turn decisive rows commit to the whole conversation, not one prompt string.
MULTI_TURN: Final = ContentFingerprint(b"rowgate:pairwise-content-multiturn:v1\x00")
#: tie / neither: no winner, so the pair is committed in canonical order with the label.
UNRANKED: Final = ContentFingerprint(b"rowgate:pairwise-content-unranked:v1\x00")


@register_kind
class Pairwise(RecordKind):
    id = "pairwise-v2"
    version_field = "schema_version"
    version_value = "pairwise-v2"

    def content(self, record: dict[str, Any]) -> tuple[ContentFingerprint, Sequence[str]]:
        """Seed 002's profile for a decisive single-user-turn row; separate domains else.

        Seed 002: "Multi-turn tasks need a separate profile committing to the complete
        system, user, and tool context. Ties need canonical A/B order and an explicit tie
        label under a distinct domain." The patch is "" when absent, as the seed defines.
        """
        messages = record["messages"]
        preference = record["preference"]
        patch = record["golden_patch"] or ""
        a, b = record["response_a"], record["response_b"]
        if preference in ("A", "B"):
            chosen, rejected = (a, b) if preference == "A" else (b, a)
            if len(messages) == 1 and messages[0]["role"] == "user":
                return PAIRWISE_CONTENT_V1, (messages[0]["content"], chosen, rejected, patch)
            context = ContentFingerprint.json_field(messages)
            return MULTI_TURN, (context, chosen, rejected, patch)
        first, second = sorted((a, b), key=lambda s: s.encode("utf-8"))
        context = ContentFingerprint.json_field(messages)
        return UNRANKED, (preference, context, first, second, patch)

    def review_subject(self) -> DedupeKey:
        """Seed 000's review policy counts "independent reviews" of one item: a pairwise
        row reviews a conversation and its two candidates, in either A/B order (the
        content fingerprint's task and candidates without the verdict). Compared exactly:
        every message length-prefixed, no normalisation."""
        import polars as pl  # global phase only: gate workers never import polars

        from pipeline.dedupe.keys import DedupeKey, KeyField

        return DedupeKey(
            "conversation + unordered pair of responses, exactly",
            ("messages", "response_a", "response_b"),
            (
                KeyField("conversation", conversation_key()),
                KeyField("responses", pl.concat_list("response_a", "response_b"), unordered=True),
            ),
        )

    def dedupe_key(self) -> DedupeKey:
        """The same conversation and the same *unordered* pair of responses: a row with A
        and B swapped is the same comparison whatever its preference says."""
        import polars as pl  # gate workers import polars only for dedupe row keys

        from pipeline.dedupe.keys import DedupeKey, KeyField

        turn = (
            pl.element().struct.field("role") + pl.lit(": ") + pl.element().struct.field("content")
        )
        return DedupeKey(
            "conversation + unordered pair of responses",
            ("messages", "response_a", "response_b"),
            (
                KeyField("conversation", pl.col("messages").list.eval(turn), ordered=True),
                KeyField("responses", pl.concat_list("response_a", "response_b"), unordered=True),
            ),
        )


def conversation_key() -> pl.Expr:
    """Length-prefixed role:len:content of every message: an exact, unambiguous key."""
    import polars as pl  # global phase only: gate workers never import polars

    element = pl.element().struct
    return (
        pl.col("messages")
        .list.eval(
            pl.format(
                "{}:{}:{}",
                element.field("role"),
                element.field("content").str.len_bytes(),
                element.field("content"),
            )
        )
        .list.join("")
    )


# -- semantic rules (seed 000, "Apply semantic checks for turn ordering, final user intent,
#    distinct candidates, and rationale consistency") -------------------------------------

_WORD = re.compile(r"[^\W\d_]{2,}")
_FILLER: Final = frozenset(
    [
        "lorem",
        "ipsum",
        "dolor",
        "sit",
        "amet",
        "asdf",
        "qwerty",
        "test",
        "testing",
        "todo",
        "tbd",
        "na",
        "none",
        "n/a",
        "xxx",
        "foo",
        "bar",
        "baz",
        "blah",
        "placeholder",
        "same",
        "ok",
        "okay",
        "fine",
        "good",
        "bad",
        "better",
        "worse",
    ]
)
# "Response B is (clearly) better": matched from the letter on (4× faster than one
# case-insensitive pattern), then the word before the letter is checked.
_VERDICT_TAIL = re.compile(
    r"([ABab])\s+(?:is|was)\s+(?:clearly\s+|much\s+|far\s+)?"
    r"(?:better|preferred|superior|more\s+correct|the\s+better\s+one)\b"
)
_CANDIDATE_NOUNS: Final = ("response", "answer", "candidate", "option")


# -- batch forms of the rules below (pipeline.kinds.rules: each one only clears rows it
#    proves have no finding; every other row goes through the rule itself) ---------------


def _column(columns: pa.RecordBatch, name: str) -> pa.Array:
    return columns.column(columns.schema.get_field_index(name))


def _turns(columns: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every message's row, its index in its row, whether its role is system / user /
    assistant (three rows of a matrix; a null role is none of them), and the list offsets."""
    messages = _column(columns, "messages")
    roles = pc.struct_field(pc.list_flatten(messages), ["role"])
    parents = pc.list_parent_indices(messages).to_numpy()
    offsets = messages.offsets.to_numpy()
    index = np.arange(len(parents)) - (offsets[:-1] - offsets[0])[parents]
    role = {
        r: pc.fill_null(pc.equal(roles, r), False).to_numpy(zero_copy_only=False)
        for r in ("system", "user", "assistant")
    }
    return parents, index, np.stack([role["system"], role["user"], role["assistant"]]), offsets


def _rows_with(parents: np.ndarray, where: np.ndarray, rows: int) -> np.ndarray:
    """The rows (of ``rows``) holding at least one element where ``where``."""
    found: np.ndarray = np.bincount(parents[where], minlength=rows) > 0
    return found


def _valid(columns: pa.RecordBatch, name: str) -> np.ndarray:
    valid: np.ndarray = pc.is_valid(_column(columns, name)).to_numpy(zero_copy_only=False)
    return valid


def _differ_after_folding(columns: pa.RecordBatch, ctx: RuleContext) -> np.ndarray:
    """Responses provably different after folding (rules.folded_heads_differ)."""
    return folded_heads_differ(_column(columns, "response_a"), _column(columns, "response_b"))


#: the rationale's first bytes read for words (the rule stops at min_rationale_words),
#: then more for the rows still short of them
_WORD_WIDTHS: Final = (64, 512)
#: byte -> 1 for an ASCII letter, 2 for a non-ASCII byte, 0 for a word boundary
_WORD_CLASS: Final = np.zeros(256, np.uint8)
_WORD_CLASS[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", np.uint8)] = 1
_WORD_CLASS[0x80:] = 2
#: the bytes of a word's first ``k`` letters in a little-endian uint64, by ``k`` (0..8)
_SIZE_MASKS: Final = np.array([(1 << (8 * min(k, 8))) - 1 for k in range(9)], np.uint64)
_LOWERCASE: Final = np.uint64(0x2020202020202020)  # OR-ed into ASCII letters: lowercase


def _word_key(word: str) -> int:
    """:func:`_ascii_words`' key of a lowercase ASCII word: its first 8 bytes and its size."""
    head = word.encode()[:8].ljust(8, b"\0")
    return int.from_bytes(head, "little") ^ (min(len(word), 255) << 56)


_FILLER_KEYS: Final = np.array(sorted({_word_key(w) for w in _FILLER}), np.uint64)


def _enough_words(columns: pa.RecordBatch, ctx: RuleContext) -> np.ndarray:
    """Rationales with ``min_rationale_words`` distinct non-filler ASCII words (with 0
    needed, a rationale without any word still has a finding)."""
    needed = max(ctx.settings.min_rationale_words, 1)
    return narrowed(
        lambda texts, width: _ascii_words(texts, width) >= needed,
        (_column(columns, "rationale"),),
        _WORD_WIDTHS,
    )


def _ascii_words(texts: pa.Array, width: int) -> np.ndarray:
    """Distinct non-filler words per text among the ASCII words of its first ``width``
    bytes, a lower bound of the rule's count. A run of ASCII letters between ASCII
    non-letters (or the text's ends) is one whole match of the rule's pattern, its
    casefold its lowercase; a run touching a non-ASCII character (maybe a letter that
    extends the word) or the cut is not counted. Words are told apart by their first 8
    letters and their size: words sharing both are counted once (and one sharing them
    with a filler word is taken for filler), which only undercounts."""
    heads, lengths = text_heads(texts, width)
    n = len(lengths)
    kind = np.take(_WORD_CLASS, heads)
    part = kind != 0  # the padding is NUL: a boundary
    begins = part.copy()
    begins[:, 1:] &= ~part[:, :-1]
    ends = part.copy()
    ends[:, :-1] &= ~part[:, 1:]
    starts, last = np.flatnonzero(begins), np.flatnonzero(ends)
    if not len(starts):
        return np.zeros(n, np.int64)
    size = last - starts + 1
    flat = heads.ravel()
    non_ascii = np.concatenate(([0], np.cumsum(kind.ravel() == 2, dtype=np.int32)))
    poisoned = non_ascii[last + 1] > non_ascii[starts]
    row, first = np.divmod(starts, width)
    cut = (first + size == width) & (lengths[row] > width)
    window = np.take(flat, starts[:, None] + np.arange(8), mode="clip")
    packed = window.view("<u8")[:, 0] | _LOWERCASE  # byte k of the word in bits 8k..8k+7
    sizes = np.minimum(size, 255).astype(np.uint64)
    keys = (packed & _SIZE_MASKS[np.minimum(size, 8)]) ^ (sizes << np.uint64(56))
    word = (size >= 2) & ~poisoned & ~cut & ~np.isin(keys, _FILLER_KEYS)
    rows, keys = row[word], keys[word]
    order = np.lexsort((keys, rows))
    rows, keys = rows[order], keys[order]
    new = np.ones(len(rows), np.bool_)
    new[1:] = (rows[1:] != rows[:-1]) | (keys[1:] != keys[:-1])
    return np.bincount(rows[new], minlength=n)


def _system_first(columns: pa.RecordBatch, ctx: RuleContext) -> np.ndarray:
    parents, index, role, _ = _turns(columns)
    late_system = _rows_with(parents, role[0] & (index > 0), len(columns))
    cleared: np.ndarray = _valid(columns, "messages") & ~late_system
    return cleared


def _alternate(columns: pa.RecordBatch, ctx: RuleContext) -> np.ndarray:
    """Non-system turns numbered within their row: even ones are user turns, odd ones
    assistant turns."""
    parents, _, role, offsets = _turns(columns)
    turn = ~role[0]
    seen = np.concatenate(([0], np.cumsum(turn)))
    number = seen[1:] - seen[(offsets[:-1] - offsets[0])[parents]]  # 1 for a row's first
    wrong = turn & np.where(number % 2 == 1, ~role[1], ~role[2])
    out_of_turn = _rows_with(parents, wrong, len(columns))
    cleared: np.ndarray = _valid(columns, "messages") & ~out_of_turn
    return cleared


def _last_is_user(columns: pa.RecordBatch, ctx: RuleContext) -> np.ndarray:
    _, _, role, offsets = _turns(columns)
    ends = offsets[1:] - offsets[0]
    nonempty = ends > offsets[:-1] - offsets[0]
    last_user = np.zeros(len(columns), np.bool_)
    last_user[nonempty] = role[1][ends[nonempty] - 1]
    return _valid(columns, "messages") & last_user


def _patch_present(columns: pa.RecordBatch, ctx: RuleContext) -> pa.Array:
    """Not a neither row, or a patch holding a visible ASCII character (never blank)."""
    return pc.or_kleene(
        pc.not_equal(_column(columns, "preference"), "neither"),
        pc.match_substring_regex(_column(columns, "golden_patch"), "[!-~]"),
    )


def _known_rubric(columns: pa.RecordBatch, ctx: RuleContext) -> pa.Array:
    version = _column(columns, "rubric_version")
    scored_with = ctx.scored_with.get("pairwise-v2")
    if scored_with is not None:
        return pc.equal(version, scored_with)
    allowed = ctx.settings.rubric_versions
    if allowed:
        return pc.is_in(version, pa.array(list(allowed), pa.string()))
    return np.ones(len(columns), np.bool_)  # the rule checks nothing


def _total(columns: pa.RecordBatch, length: Callable[[pa.Array], pa.Array]) -> np.ndarray:
    """Each row's total ``length`` (characters or bytes) of its texts: message contents,
    responses, rationale and patch (a null patch counts 0; any other null text gives NaN,
    which clears nothing). Totals in float64, exact below 2**53."""

    def of(texts: pa.Array) -> np.ndarray:
        values: np.ndarray = length(texts).to_numpy(zero_copy_only=False)
        return values.astype(np.float64)

    messages = _column(columns, "messages")
    contents = pc.struct_field(pc.list_flatten(messages), ["content"])
    parents = pc.list_parent_indices(messages).to_numpy()
    total = np.bincount(parents, weights=of(contents), minlength=len(columns))
    for name in ("response_a", "response_b", "rationale"):
        total += of(_column(columns, name))
    total += pc.fill_null(length(_column(columns, "golden_patch")), 0).to_numpy()
    return total


def _within_size(columns: pa.RecordBatch, ctx: RuleContext) -> np.ndarray:
    """Rows within ``max_conversation_chars``: a row whose texts take no more UTF-8 bytes
    than that has no more characters (a character takes one byte or more), read off the
    offsets alone; only the rows over it in bytes are counted in characters (1.5 → 0.03 µs
    a row on 3.3 KB pairwise rows)."""
    limit = ctx.settings.max_conversation_chars

    def within(rows: pa.RecordBatch, length: Callable[[pa.Array], pa.Array]) -> np.ndarray:
        valid: np.ndarray = _valid(rows, "messages") & (_total(rows, length) <= limit)
        return valid

    return narrowed(within, (columns,), (pc.binary_length, pc.utf8_length))


def _no_other_verdict(columns: pa.RecordBatch, ctx: RuleContext) -> pa.Array:
    r"""Not a decisive row, or no ``<other letter> <non-alphanumerics> is|was`` in its
    rationale: every match of the rule's pattern naming the other letter has one (its
    ``\s+`` is never alphanumeric), so the rule can only name the preferred letter."""
    preference = _column(columns, "preference")
    rationale = _column(columns, "rationale")
    names = {
        letter: pc.match_substring_regex(
            rationale, f"[{letter}{letter.lower()}][^0-9A-Za-z]+(?:is|was)"
        )
        for letter in "AB"
    }
    return pc.or_kleene(
        pc.invert(pc.is_in(preference, pa.array(["A", "B"]))),
        pc.or_kleene(
            pc.and_kleene(pc.equal(preference, "A"), pc.invert(names["B"])),
            pc.and_kleene(pc.equal(preference, "B"), pc.invert(names["A"])),
        ),
    )


@record_rule(
    "pairwise-v2",
    "distinct_candidates",
    meaning="the two responses are the same text after NFC, case and whitespace folding",
    spec=Spec.ARCV_SCHEMAS,
    batch=_differ_after_folding,
)
def distinct_candidates(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Validate candidate distinctness ... outside structural validation."
    The two responses may not be the same text up to Unicode normalisation, case and
    whitespace: comparing two non-empty strings proves nothing about a preference."""
    if same_text(record["response_a"], record["response_b"]):
        yield Finding("$.response_b", "same text as response_a after normalisation")


@record_rule(
    "pairwise-v2",
    "substantive_rationale",
    meaning="the rationale has fewer than rules.min_rationale_words distinct non-filler words",
    spec=Spec.ARCV_SCHEMAS,
    batch=_enough_words,
)
def substantive_rationale(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "An all-whitespace rationale can meet a numerical length threshold, so
    semantic validation must reject it." A rationale needs ``rules.min_rationale_words``
    distinct words of two or more letters that are not filler (lorem ipsum, asdf, n/a...)."""
    needed = ctx.settings.min_rationale_words
    words: set[str] = set()
    for match in _WORD.finditer(record["rationale"]):  # stops as soon as enough are seen
        word = match.group().casefold()
        if word not in _FILLER:
            words.add(word)
            if len(words) >= needed:
                return
    yield Finding("$.rationale", f"fewer than {needed} distinct substantive words")


@record_rule(
    "pairwise-v2",
    "system_message_first",
    meaning="a system message after the first turn",
    spec=Spec.ARCV_SCHEMAS,
    batch=_system_first,
)
def system_message_first(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Apply semantic checks for turn ordering": a system message may only open
    the conversation."""
    for i, message in enumerate(record["messages"]):
        if message["role"] == "system" and i > 0:
            yield Finding(f"$.messages[{i}].role", "system message after the first turn")


@record_rule(
    "pairwise-v2",
    "alternating_turns",
    meaning="user and assistant turns do not alternate from a user turn",
    spec=Spec.ARCV_SCHEMAS,
    batch=_alternate,
)
def alternating_turns(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Apply semantic checks for turn ordering": after an optional system
    message, user and assistant turns alternate, starting with the user."""
    turns = [(i, m["role"]) for i, m in enumerate(record["messages"]) if m["role"] != "system"]
    expected = "user"
    for i, role in turns:
        if role != expected:
            yield Finding(f"$.messages[{i}].role", f"expected a {expected} turn")
            return
        expected = "assistant" if role == "user" else "user"


@record_rule(
    "pairwise-v2",
    "ends_with_user_turn",
    meaning="the conversation does not end with a user turn",
    spec=Spec.ARCV_SCHEMAS,
    batch=_last_is_user,
)
def ends_with_user_turn(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Apply semantic checks for ... final user intent": both candidates answer
    the last message, so it must be a user turn."""
    last = len(record["messages"]) - 1
    if record["messages"][last]["role"] != "user":
        yield Finding(f"$.messages[{last}].role", "the conversation does not end with a user turn")


@record_rule(
    "pairwise-v2",
    "neither_needs_patch",
    meaning="preference neither without a non-blank golden patch",
    spec=Spec.ARCV_GATEWAY,
    batch=_patch_present,
)
def neither_needs_patch(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 002: "Require correction text when correction mode is selected" (DESIGN §3.8:
    "`neither` needs a golden patch"). The schema requires a string of 15+ characters;
    this rule also refuses a patch that is only whitespace."""
    patch = record["golden_patch"]
    if record["preference"] == "neither" and (patch is None or is_blank(patch)):
        yield Finding("$.golden_patch", "preference 'neither' without a substantive golden patch")


@record_rule(
    "pairwise-v2",
    "rubric_version",
    meaning="the row names another rubric than the one the campaign scores it with (or lists)",
    spec=Spec.ARCV_SCHEMAS,
    batch=_known_rubric,
)
def rubric_version(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "preserve their versions with every accepted artifact" and DESIGN §3.8
    "ratings bound to rubric criteria by the campaign": a row scored with a rubric
    (``[scoring.pairwise-v2]``) must name that rubric, or its ratings were given under
    another one; a campaign that does not score the kind but lists its rubric versions
    (``rules.rubric_versions``) gets rows naming one of them."""
    scored_with = ctx.scored_with.get("pairwise-v2")
    if scored_with is not None:
        if record["rubric_version"] != scored_with:
            yield Finding(
                "$.rubric_version", f"not the rubric the row is scored with ({scored_with})"
            )
        return
    allowed = ctx.settings.rubric_versions
    if allowed and record["rubric_version"] not in allowed:
        yield Finding("$.rubric_version", "not a rubric version of this campaign")


@record_rule(
    "pairwise-v2",
    "aggregate_size",
    meaning="messages, responses, rationale and patch together exceed rules.max_conversation_chars",
    spec=Spec.ARCV_SCHEMAS,
    batch=_within_size,
)
def aggregate_size(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Bound aggregate conversation size as well as individual fields. Sixty-four
    individually valid long messages may exceed a campaign's intended model context or
    storage budget." Every message, both responses, the rationale and the golden patch
    together stay within ``rules.max_conversation_chars`` characters."""
    limit = ctx.settings.max_conversation_chars
    total = sum(len(m["content"]) for m in record["messages"])
    total += len(record["response_a"]) + len(record["response_b"]) + len(record["rationale"])
    total += len(record["golden_patch"] or "")
    if total > limit:
        yield Finding("$", f"conversation text totals {total} characters, the bound is {limit}")


@record_rule(
    "pairwise-v2",
    "rationale_consistency",
    Severity.QUARANTINE,
    meaning="the rationale calls the other response the better one: a person decides",
    spec=Spec.ARCV_SCHEMAS,
    batch=_no_other_verdict,
)
def rationale_consistency(record: dict[str, Any], ctx: RuleContext) -> Iterator[Finding]:
    """Seed 000: "Validate ... rationale consistency outside structural validation." When
    a decisive row's rationale explicitly calls the *other* response the better one, the
    label and its justification disagree; a person decides which is wrong (quarantine)."""
    preference = record["preference"]
    if preference not in ("A", "B"):
        return
    rationale = record["rationale"]
    named = set()
    for match in _VERDICT_TAIL.finditer(rationale):
        start = match.start()
        before = rationale[max(0, start - 12) : start]
        if before[-1:].isspace() and before.rstrip().casefold().endswith(_CANDIDATE_NOUNS):
            named.add(match.group(1).upper())
    if named and preference not in named:
        yield Finding("$.rationale", "rationale names the other response as better")
