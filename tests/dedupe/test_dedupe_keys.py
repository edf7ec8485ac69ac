"""Duplicate keys per kind and their normalisation (DESIGN §3.9)."""

from __future__ import annotations

import copy
import random
import unicodedata

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
    replacing each with itself: the same strings as folding every ``\\s+`` run."""
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String})
    folded = frame.select(Normalisation(False, True, False).text(pl.col("t"))).to_series()
    every_run = frame.select(pl.col("t").str.replace_all(r"\s+", " ").str.strip_chars(" "))
    assert folded.to_list() == every_run.to_series().to_list()


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
    texts = ["STRASSE", None, "Cafe\u0301", "", "ǅ", None, "x"]
    frame = pl.DataFrame({"t": texts}, schema={"t": pl.String})
    folded = frame.select(Normalisation(True, False, True).text(pl.col("t"))).to_series()
    expected = [None if t is None else unicodedata.normalize("NFC", t.casefold()) for t in texts]
    assert folded.to_list() == expected
