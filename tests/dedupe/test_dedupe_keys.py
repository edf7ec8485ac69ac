"""Duplicate keys per kind and their normalisation (DESIGN §3.9)."""

from __future__ import annotations

import copy
import random
import sys
import unicodedata
from collections.abc import Callable

import orjson
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.dedupe import normalise
from pipeline.dedupe.keys import DedupeKey, KeyField, key_columns, text_columns
from pipeline.dedupe.normalise import Normalisation
from pipeline.kinds import get_kind
from pipeline.testing.synthetic import make_record
from tests.dedupe_helpers import kind_frame


def _keys(kind: str, records: list[dict], normalisation: Normalisation | None) -> list[str]:
    key = get_kind(kind).dedupe_key()
    assert key is not None
    return kind_frame(kind, records).select(key_columns(key, normalisation)).to_series().to_list()


@pytest.mark.parametrize(
    ("a", "b", "switch"),
    [
        ("caf\u0065\u0301", "caf\u00e9", "nfc"),
        ("two  words\tand\u3000more\n", "two words and more", "fold_whitespace"),
        ("STRASSE ΣΊΣΥΦΟΣ", "straße σίσυφος", "fold_case"),
    ],
)
def test_each_normalisation_step_is_a_switch(a: str, b: str, switch: str) -> None:
    frame = pl.DataFrame({"t": [a, b]})
    on = frame.select(Normalisation().text(pl.col("t"))).to_series().to_list()
    assert on[0] == on[1]
    off = Normalisation(**{switch: False})
    assert len(set(frame.select(off.text(pl.col("t"))).to_series().to_list())) == 2


def test_pairwise_key_ignores_ab_order_not_the_conversation() -> None:
    record = make_record("pairwise-v2", random.Random(1), 1)
    swapped = dict(record, response_a=record["response_b"], response_b=record["response_a"])
    other = copy.deepcopy(record)
    other["messages"][-1]["content"] += " and more"
    for normalisation in (None, Normalisation()):
        keys = _keys("pairwise-v2", [record, swapped, other], normalisation)
        assert keys[0] == keys[1] != keys[2]


def test_pairwise_normalised_key_folds_case_and_space() -> None:
    record = make_record("pairwise-v2", random.Random(2), 1)
    loud = copy.deepcopy(record)
    loud["response_a"] = "  " + record["response_a"].upper().replace(" ", "\t  ")
    raw = _keys("pairwise-v2", [record, loud], None)
    normalised = _keys("pairwise-v2", [record, loud], Normalisation())
    assert raw[0] != raw[1]
    assert normalised[0] == normalised[1]


def test_key_components_are_length_prefixed() -> None:
    key = DedupeKey("x", ("a", "b"), (KeyField("a", pl.col("a")), KeyField("b", pl.col("b"))))
    frame = pl.DataFrame({"a": ["ab", "a"], "b": ["c", "bc"]})
    keys = frame.select(key_columns(key, None)).to_series().to_list()
    assert keys[0] != keys[1]


def _regrouped(kind: str, record: dict) -> dict:
    """``record`` with its list field's first two elements merged into one, joined by a
    newline (a conversation's first two turns, a derivation's first two steps, a trace's
    first two calls): the same text, another structure."""
    merged = copy.deepcopy(record)
    if kind == "pairwise-v2":
        first, second = merged["messages"][:2]
        first["content"] += f"\n{second['role']}: {second['content']}"
        del merged["messages"][1]
    elif kind == "math-reasoning-v1":
        merged["derivation"][:2] = ["\n".join(merged["derivation"][:2])]
    else:
        first, second = merged["steps"][:2]
        arguments = first["arguments"]
        first["tool"] += f" {orjson.dumps(arguments).decode()}\n{second['tool']}"
        first["arguments"] = second["arguments"]
        del merged["steps"][1]
    return merged


@pytest.mark.parametrize("kind", ["pairwise-v2", "math-reasoning-v1", "agent-trace-v1"])
def test_where_a_list_element_ends_is_part_of_the_key(kind: str) -> None:
    """Two turns, steps or calls are not one that holds both texts on two lines: the
    elements of an ordered list are length-prefixed in the key, raw or normalised, with
    every fold off too. The near rule's text (its words) is the same for both."""
    rng = random.Random(9)
    record = make_record(kind, rng, 1)
    field = {"pairwise-v2": "messages", "math-reasoning-v1": "derivation"}.get(kind, "steps")
    while len(record[field]) < 2:
        record = make_record(kind, rng, 1)
    if kind == "pairwise-v2":  # turns alternate: the first two are the user's, then a reply
        record["messages"][:2] = [
            {"role": "user", "content": "What does merge_rows do?"},
            {"role": "assistant", "content": "It merges rows."},
        ]
    merged = _regrouped(kind, record)
    every_fold_off = Normalisation(nfc=False, fold_whitespace=False, fold_case=False)
    for normalisation in (None, Normalisation(), every_fold_off):
        keys = _keys(kind, [record, merged], normalisation)
        assert keys[0] != keys[1], normalisation
    key = get_kind(kind).dedupe_key()
    assert key is not None
    texts = kind_frame(kind, [record, merged]).select(text_columns(key, Normalisation()))
    words = texts.to_series().str.extract_all(r"\w+").to_list()
    assert words[0] == words[1]


def test_a_list_is_ordered_or_unordered() -> None:
    with pytest.raises(ValueError, match="ordered or unordered"):
        KeyField("x", pl.col("x"), ordered=True, unordered=True)


def test_grounded_qa_key_is_question_and_citation_set() -> None:
    rng = random.Random(3)
    record = make_record("grounded-qa-v1", rng, 1)
    while len(record["citations"]) < 2:
        record = make_record("grounded-qa-v1", rng, 1)
    reordered = dict(record, citations=list(reversed(record["citations"])), answer="other")
    fewer = dict(record, citations=record["citations"][:1])
    keys = _keys("grounded-qa-v1", [record, reordered, fewer], Normalisation())
    assert keys[0] == keys[1] != keys[2]


def test_pw_decide_row_key_is_state_and_offered_sets() -> None:
    record = make_record("pw-decide-row-1", random.Random(4), 1)
    relabelled = copy.deepcopy(record)
    relabelled["offered"]["loadable"] = list(reversed(record["offered"]["loadable"]))
    relabelled["labels"]["tools"] = []
    relabelled["session"] = "s-other"
    moved = copy.deepcopy(record)
    moved["offered"]["guides"] = ["style"]
    keys = _keys("pw-decide-row-1", [record, relabelled, moved], Normalisation())
    assert keys[0] == keys[1] != keys[2]


def test_agent_trace_key_ignores_call_ids_latency_and_results() -> None:
    record = make_record("agent-trace-v1", random.Random(5), 1)
    rerun = copy.deepcopy(record)
    for n, step in enumerate(rerun["steps"]):
        step["call_id"] = f"call-{n + 10}"
        step["latency_ms"] += 7
        step["result"]["success"] = not step["result"]["success"]
    different = copy.deepcopy(record)
    different["steps"][0]["arguments"]["top_k"] += 1
    keys = _keys("agent-trace-v1", [record, rerun, different], Normalisation())
    assert keys[0] == keys[1] != keys[2]


def test_every_kind_has_a_key_and_text() -> None:
    for kind in ("pairwise-v2", "agent-trace-v1", "grounded-qa-v1", "math-reasoning-v1",
                 "pw-decide-row-1"):  # fmt: skip
        key = get_kind(kind).dedupe_key()
        assert key is not None
        records = [make_record(kind, random.Random(i), i) for i in range(3)]
        texts = kind_frame(kind, records).select(text_columns(key, Normalisation())).to_series()
        assert texts.null_count() == 0
        assert texts.str.len_chars().min() > 0


_SPACES = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2028", "\u3000"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(st.sampled_from([*_SPACES, "\u200b", "a", "É"]), max_size=12) | st.text(max_size=6),
        max_size=20,
    )
)
def test_whitespace_folding_is_every_run_to_one_space(texts: list[str]) -> None:
    """Whitespace folding skips lone spaces (most of a text's whitespace) instead of
    replacing each with itself: the same strings as Python's ``" ".join(t.split())``,
    the kinds' rules' folding (``\\x1c`` to ``\\x1f`` included, which the regex
    engine's ``\\s`` is not)."""
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String})
    folded = frame.select(Normalisation(False, True, False).text(pl.col("t"))).to_series()
    assert folded.to_list() == [" ".join(t.split()) for t in texts]


def test_every_character_python_splits_at_is_folded() -> None:
    """Each character ``str.isspace`` accepts, and no other, folds to a space between
    two letters, as the rules' folding sees it (:func:`pipeline.kinds.rules.folded`)."""
    from pipeline.kinds.rules import folded as rules_folded

    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    frame = pl.DataFrame({"t": [f"a{c}b" for c in chars]})
    folded = frame.select(Normalisation(False, True, False).text(pl.col("t"))).to_series()
    spaced = [c for c, text in zip(chars, folded.to_list(), strict=True) if text == "a b"]
    assert spaced == [c for c in chars if c.isspace()]
    assert all(rules_folded(f"a{c}b") == "a b" for c in spaced)


@settings(max_examples=300)
@given(st.lists(st.none() | st.text(), max_size=20))
def test_nfc_and_case_folding_are_pythons(texts: list[str | None]) -> None:
    """NFC and case folding are this Python's ``unicodedata.normalize`` and
    ``str.casefold`` (NFC again after folding), whatever the batch: one Unicode version,
    the one the docs name, in the gate's batches and in the parent's whole column alike."""
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String})

    def nfc(text: str) -> str:
        return unicodedata.normalize("NFC", text)

    for switches, expected in (
        ((True, False, True), lambda t: nfc(nfc(t).casefold())),
        ((True, False, False), nfc),
        ((False, False, True), str.casefold),
    ):
        got = frame.select(Normalisation(*switches).text(pl.col("t"))).to_series().to_list()
        assert got == [None if t is None else expected(t) for t in texts]
        listed = (
            frame.select(
                pl.concat_list("t", "t").list.eval(Normalisation(*switches).text(pl.element()))
            )
            .to_series()
            .to_list()
        )
        assert listed == [[None, None] if t is None else [expected(t)] * 2 for t in texts]


@pytest.mark.parametrize("text", ["\U00010d50", "\ua7cb", "\u1c89", "GARAY \U00010d50 OK"])
def test_case_folding_follows_pythons_unicode_version_not_polars(text: str) -> None:
    """Capital letters that Unicode encoded after this Python's Unicode version: polars'
    lowercasing (its own Unicode tables) folded them, ``str.casefold`` does not; the key
    is Python's, so it does not change when polars is upgraded."""
    frame = pl.DataFrame({"t": [text]})
    folded = frame.select(Normalisation().text(pl.col("t"))).to_series().to_list()
    assert folded == [unicodedata.normalize("NFC", text.casefold())]


def test_folding_a_column_slice_by_slice_folds_every_string(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Python strings are built a slice at a time (a whole column of them took twice the
    column's memory and more); every slice, nulls included, comes back in order."""
    monkeypatch.setattr(normalise, "_SLICE", 3)
    # Python folds what the fast fold is not proved for: combining marks, İ, ǰ, Hangul jamo
    texts = ["Cafe\u0301", None, "\u0130", "", "\u01f0", None, "\u1100\u1161", "STRASSE", "a\u0300"]
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String})
    folded = frame.select(Normalisation(True, False, True).text(pl.col("t"))).to_series()
    expected = [None if t is None else unicodedata.normalize("NFC", t.casefold()) for t in texts]
    assert folded.to_list() == expected


def _python_fold(nfc: bool, fold_case: bool) -> Callable[[str], str]:
    def fold(text: str) -> str:
        if nfc:
            text = unicodedata.normalize("NFC", text)
        if fold_case:
            text = text.casefold()
        return unicodedata.normalize("NFC", text) if nfc else text

    return fold


def _fast_chars(nfc: bool, fold_case: bool) -> set[str]:
    """The characters the fast fold folds itself (its regex, as polars reads it, does not
    send them to Python)."""
    chars = pl.Series([chr(c) for start, end in normalise._FAST_DOMAIN for c in range(start, end)])
    unsafe = chars.str.contains(normalise._fast_fold(nfc, fold_case).unsafe)
    return set(chars.filter(~unsafe).to_list())


def test_the_fast_folds_premise_holds_for_every_character_it_is_proved_for() -> None:
    """The fast fold leaves to NFC nothing to do for a string of the characters it is
    proved for: none of them, nor any character of their case folds, follows the first
    character of any canonical decomposition of this Python's Unicode (so none composes
    with a character before it); each is a starter that NFC leaves alone."""
    seconds = set()
    for code in range(sys.maxunicode + 1):
        parts = unicodedata.decomposition(chr(code)).split()
        if parts and not parts[0].startswith("<"):
            seconds.update(chr(int(part, 16)) for part in parts[1:])
    for fold_case in (True, False):
        proved = _fast_chars(True, fold_case)
        assert len(proved) > 40_000
        written = proved | {c for char in proved for c in char.casefold()} if fold_case else proved
        assert not written & seconds
        # Hangul vowels and trailing consonants compose with the syllable before them by
        # an algorithm, not by a decomposition in the tables
        assert not written & {chr(c) for c in [*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)]}
        assert all(unicodedata.combining(c) == 0 for c in written)
        assert all(unicodedata.normalize("NFC", c) == c for c in written)


@pytest.mark.parametrize("switches", [(True, True), (True, False), (False, True)])
def test_each_character_folds_as_python_folds_it(switches: tuple[bool, bool]) -> None:
    """Every character of the fast fold's domain, alone and after a capital, by both
    paths: what the table or the routing gets wrong for any character shows here."""
    chars = [chr(code) for start, end in normalise._FAST_DOMAIN for code in range(start, end)]
    texts = pl.Series("t", chars + ["Ä" + c for c in chars], pl.String)
    fold = _python_fold(*switches)
    assert normalise._folded(texts, *switches).to_list() == [fold(t) for t in texts.to_list()]


#: characters the fast fold proves and characters it leaves to Python, side by side
_MIXED = st.text(
    alphabet=st.characters(max_codepoint=0x2FFF)
    | st.sampled_from("ßẞİıΣσςǅǰΐﬁ한中カ🙂\u0301\u0345\u1100\u1161\u11a8\u0bbe\u3099"),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.none() | _MIXED, max_size=20))
def test_fast_and_python_folds_agree_on_mixed_text(texts: list[str | None]) -> None:
    """Strings of characters the fast fold proves, with some it does not (which send the
    string to Python): each switch combination folds as Python does."""
    series = pl.Series("t", texts, pl.String)
    for switches in ((True, True), (True, False), (False, True)):
        fold = _python_fold(*switches)
        got = normalise._folded(series, *switches).to_list()
        assert got == [None if t is None else fold(t) for t in texts]
