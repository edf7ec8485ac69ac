"""Rules' batch forms: the Unicode facts their proofs rest on, their soundness against the
per-row rules on awkward texts, and the gate's findings with and without them."""

from __future__ import annotations

import dataclasses
import random
import re
import sys
import unicodedata
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.config import CampaignConfig, SanitizeSettings, load_campaign
from pipeline.core.reasons import Disposition
from pipeline.gate.gate import Gate, GatedBatch
from pipeline.gate.reader import LineBatch
from pipeline.kinds import KINDS, pairwise
from pipeline.kinds.rules import (
    ASCII_SPACE,
    RULES,
    RuleContext,
    _cleared,
    check_record,
    folded_heads_differ,
    pending_rules,
    same_text,
    unsound_clearances,
)
from pipeline.testing.synthetic import RULE_VIOLATIONS, make_record, plant_pii
from tests.conftest import DATA

KIND = "pairwise-v2"
CONFIGS = {
    "default": CampaignConfig(),
    "campaign": load_campaign(DATA / "campaign.toml"),  # lists its rubric versions
    # every size-, word- and version-dependent branch of the batch forms
    "tight": CampaignConfig().override(
        **{
            "rules.min_rationale_words": 0,
            "rules.max_conversation_chars": 600,
            "rules.rubric_versions": ["code-review-v1"],
        }
    ),
    "wordy": CampaignConfig().override(**{"rules.min_rationale_words": 9}),
}
GATES = {name: (Gate(c), Gate(c, batch_rules=False)) for name, c in CONFIGS.items()}
LAYOUT = GATES["default"][0].kind_gate(KINDS[KIND]).layout


# -- the facts the proofs rest on, checked against this Python's Unicode tables ----------


def test_ascii_is_a_normalisation_boundary() -> None:
    """No character's canonical decomposition has an ASCII character after its first
    (so no ASCII character composes with one before it), and ASCII characters are
    starters that NFC leaves alone."""
    for code in range(sys.maxunicode + 1):
        parts = unicodedata.decomposition(chr(code)).split()
        if parts and not parts[0].startswith("<"):
            assert all(int(p, 16) >= 0x80 for p in parts[1:]), hex(code)
    for code in range(0x80):
        assert unicodedata.combining(chr(code)) == 0
        assert unicodedata.normalize("NFC", chr(code)) == chr(code)


def test_ascii_folds_and_splits_as_the_batch_forms_assume() -> None:
    ascii_chars = [chr(c) for c in range(0x80)]
    assert all(c.casefold() == c.lower() == c.translate({}).lower() for c in ascii_chars)
    assert {c for c in ascii_chars if c.isspace()} == set(ASCII_SPACE.decode())
    letters = {c for c in ascii_chars if re.fullmatch(r"[^\W\d_]", c)}
    assert letters == set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    # rationale_consistency's superset: what the rule's ``\s`` matches is never ASCII
    # alphanumeric (one scan of every code point)
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    assert not [c for c in re.findall(r"\s", every) if c.isascii() and c.isalnum()]
    assert len(re.findall(r"\s", every)) > len(ASCII_SPACE)  # Unicode spaces are seen too


# -- awkward texts -----------------------------------------------------------------------

#: pieces whose folding Python decides with Unicode tables: case folding to ASCII
#: (ß, ſ, Kelvin K, ﬁ), combining marks after ASCII, non-ASCII whitespace and letters
PIECES = [
    "Response", "response", "RESPONSE", "answer", "option", "candidate", "A", "B", "a", "b",
    "is", "was", "better", "clearly", "preferred", "the", "better", "one", "it", "keeps",
    "order", "lorem", "ipsum", "asdf", "ok", "n/a", "x", "def", "f(x):", "return", "42",
    "_id", "naïve", "e\u0301", "E\u0301", "straße", "STRASSE", "ſ", "\u212a", "ﬁle", "İ",
    "数据", "emoji🙂", "“quoted”", "—", "\x00", "\x1c", " ", "  ", "\t", "\n", "\u00a0",
    "\u3000", "\u2028", "\x85", "\u200b", ".", ",", ":", "-",
]  # fmt: skip
TEXT = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
    st.lists(st.sampled_from(PIECES), max_size=8).map(" ".join),
    st.text(max_size=60),
)


def _variant(text: str, how: int) -> str:
    """A text equal to ``text`` after folding (or nearly, to stress the boundary)."""
    if how == 0:
        return text.upper()
    if how == 1:
        return "\t " + text.replace(" ", "\u00a0\n") + "  "
    if how == 2:
        return unicodedata.normalize("NFD", text)
    if how == 3:
        return text.replace("s", "ſ").replace("k", "\u212a")
    if how == 4:
        return text + "x"
    return text.swapcase()


def _record(draw: st.DrawFn, i: int) -> dict[str, Any]:
    record = make_record(KIND, random.Random(i), i)
    for field in ("response_a", "response_b", "rationale"):
        if draw(st.booleans()):
            record[field] = draw(TEXT)
    if draw(st.booleans()):
        record["response_b"] = _variant(record["response_a"], draw(st.integers(0, 6)))
    if draw(st.booleans()):
        roles = draw(
            st.lists(st.sampled_from(["system", "user", "assistant"]), min_size=1, max_size=6)
        )
        record["messages"] = [{"role": r, "content": draw(TEXT) or "x"} for r in roles]
    record["preference"] = draw(st.sampled_from(["A", "B", "tie", "neither"]))
    record["golden_patch"] = draw(
        st.none() | TEXT | st.sampled_from([" \t" * 9, "\u00a0" * 16, "\u200b" * 15 + "x"])
    )
    if draw(st.integers(0, 9)) == 0:
        record["rubric_version"] = "legacy-rubric"
    if draw(st.booleans()):
        verdict = draw(
            st.sampled_from(["Response B is better", "answer\u00a0a was clearly better"])
        )
        record["rationale"] = (
            draw(st.sampled_from(["", "x ", "Ok. "])) + verdict + record["rationale"]
        )
    return record


@st.composite
def records(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 12))
    return [_record(draw, i) for i in range(count)]


def _columns(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([r[name] for r in rows], type=f.type) for name, f in LAYOUT.sources],
        names=[name for name, _ in LAYOUT.sources],
    )


# -- soundness: a batch form never clears a row its rule flags ----------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=records(), config=st.sampled_from(sorted(CONFIGS)))
def test_batch_forms_never_clear_a_row_their_rule_flags(
    rows: list[dict[str, Any]], config: str
) -> None:
    ctx = GATES[config][0].rule_context
    assert unsound_clearances(KIND, _columns(rows), rows, ctx) == []


@settings(max_examples=500, deadline=None)
@given(a=TEXT, b=TEXT, how=st.integers(0, 6), twin=st.booleans())
def test_folded_heads_differ_only_where_the_folded_texts_differ(
    a: str, b: str, how: int, twin: bool
) -> None:
    if twin:
        b = _variant(a, how)
    differ = folded_heads_differ(pa.array([a, a]), pa.array([b, a]), (4, 32, 256))
    assert not differ[1]
    if differ[0]:
        assert not same_text(a, b)


def test_words_and_heads_cut_at_every_offset_stay_sound() -> None:
    """A word the cut splits is not a word ("alp" of a repeated "alpha" would make a
    fourth distinct word), and a head cut before a combining mark proves nothing: at
    every offset around each width the batch forms read."""
    base = make_record(KIND, random.Random(0), 0)
    rows = []
    for k in range(560):
        rationale = "alpha beta gamma" + "." * k + " alpha alpha"
        head = "x" * k + "e\u0301 tail"
        rows.append(
            base | {"rationale": rationale, "response_a": head, "response_b": _variant(head, 2)}
        )
    ctx = GATES["default"][0].rule_context
    assert unsound_clearances(KIND, _columns(rows), rows, ctx) == []


def test_folded_heads_differ_decides_the_common_cases() -> None:
    """Not a soundness matter: the batch form must clear what it is for (ASCII heads that
    differ early, non-ASCII later on) or it saves nothing."""
    a = ["def f(x):\n  return x", "Sure. Here is naïve code", "same", "abc", "数据"]
    b = ["def g(x):\n  return x", "Sure, here is café code", "SAME ", "abcd", "数据x"]
    assert folded_heads_differ(pa.array(a), pa.array(b)).tolist() == [
        True,  # differ in the ASCII head
        True,  # "sure.hereis" against "sure,hereis"
        False,  # the same text
        True,  # a whole text shorter than the other's head
        False,  # no ASCII head: Python decides
    ]


def test_the_size_bound_is_read_in_bytes_then_counted_in_characters() -> None:
    """A row within ``max_conversation_chars`` in UTF-8 bytes is within it in characters;
    a row over it in bytes is counted in characters: cleared when those are within it
    (two bytes an "é" here), flagged when they are not."""
    base = make_record(KIND, random.Random(0), 0)
    rows = [base | {"rationale": base["rationale"] + "é" * k} for k in (0, 40, 80)]

    def texts(row: dict[str, Any]) -> list[str]:
        fixed = (row["response_a"], row["response_b"], row["rationale"], row["golden_patch"])
        return [m["content"] for m in row["messages"]] + [t or "" for t in fixed]

    chars = [sum(map(len, texts(r))) for r in rows]
    utf8 = [sum(len(t.encode()) for t in texts(r)) for r in rows]
    limit = chars[0] + 60
    assert utf8[0] <= limit < utf8[1]
    assert chars[1] <= limit < chars[2]
    ctx = Gate(CampaignConfig().override(**{"rules.max_conversation_chars": limit})).rule_context
    rule = next(r for r in RULES[KIND] if r.code.endswith("aggregate_size"))
    assert rule.batch is not None
    assert _cleared(rule, _columns(rows), ctx).tolist() == [True, True, False]
    assert unsound_clearances(KIND, _columns(rows), rows, ctx) == []


def test_every_pairwise_rule_has_a_batch_form_that_clears_valid_rows() -> None:
    rows = [make_record(KIND, random.Random(i), i, size=4) for i in range(64)]
    pending = pending_rules(KIND, _columns(rows), GATES["default"][0].rule_context)
    assert pending is not None
    assert all(rule.batch is not None for rule in RULES[KIND])
    assert sum(1 for rules in pending if rules) <= 2  # e.g. the rare shared long head


@pytest.mark.parametrize(
    "code", sorted(c for c in RULE_VIOLATIONS if c.startswith("semantic.pairwise"))
)
def test_a_violation_is_never_cleared(code: str) -> None:
    rows = [RULE_VIOLATIONS[code](i) for i in range(3)]
    pending = pending_rules(KIND, _columns(rows), GATES["campaign"][0].rule_context)
    assert pending is not None
    assert all(code in {rule.code for rule in rules} for rules in pending)


def test_an_unsound_batch_form_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch form clearing every row (a copy of a response passes as distinct) is what
    the soundness check and the differential gate test exist to catch."""
    code = "semantic.pairwise-v2.distinct_candidates"
    broken = [
        dataclasses.replace(rule, batch=_clear_all) if rule.code == code else rule
        for rule in RULES[KIND]
    ]
    monkeypatch.setitem(RULES, KIND, broken)
    rows = [RULE_VIOLATIONS[code](i) for i in range(3)]
    ctx = RuleContext()  # a fresh context: its active rules are read from RULES now
    assert unsound_clearances(KIND, _columns(rows), rows, ctx) == [(0, code), (1, code), (2, code)]
    assert all(check_record(KIND, r, ctx, ())[1] == [] for r in rows)  # what it would let by
    gate, reference = Gate(CampaignConfig()), Gate(CampaignConfig(), batch_rules=False)
    batch = _batch(rows)
    assert _rows(gate.gate_batch(batch, KIND)) != _rows(reference.gate_batch(batch, KIND))


def _clear_all(columns: pa.RecordBatch, ctx: RuleContext) -> np.ndarray:
    return np.ones(columns.num_rows, np.bool_)


# -- the gate with and without batch forms ------------------------------------------------


def _batch(rows: list[dict[str, Any]]) -> LineBatch:
    lines = [orjson.dumps(r) for r in rows]
    return LineBatch(first_line=1, offsets=list(range(len(lines))), lines=lines)


def _rows(gated: GatedBatch) -> tuple[Any, ...]:
    kinds = {k: b.to_pylist() for k, b in gated.kinds.items()}
    rejected = None if gated.rejected is None else gated.rejected.to_pylist()
    return kinds, rejected, sorted(gated.counts.items())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=records(), config=st.sampled_from(sorted(CONFIGS)))
def test_gate_findings_are_the_same_with_and_without_batch_forms(
    rows: list[dict[str, Any]], config: str
) -> None:
    """Dispositions, reasons (codes, paths, details, order), hashes and stored columns."""
    fast, reference = GATES[config]
    batch = _batch(rows)
    gated, expected = fast.gate_batch(batch, KIND), reference.gate_batch(batch, KIND)
    assert _rows(gated) == _rows(expected)
    assert gated.counts == expected.counts
    for kind, table in gated.kinds.items():
        assert table.equals(expected.kinds[kind])


@pytest.mark.parametrize("sanitize", [False, True])
def test_stored_rows_are_the_reference_records(sanitize: bool) -> None:
    """The staged payload is built once, before the rules: rows the rules reject leave
    it, rows the sanitizer redacts are stored redacted, the others as they are."""
    gate = Gate(CampaignConfig(sanitize=SanitizeSettings(enabled=sanitize)))
    rng = random.Random(5)
    rows = []
    for i in range(12):
        record = make_record(KIND, rng, i)
        if i % 3 == 0:
            record = plant_pii(record, rng, i)[0]
        elif i % 3 == 1:
            record = RULE_VIOLATIONS["semantic.pairwise-v2.distinct_candidates"](i)
        rows.append(record)
    batch = _batch(rows)
    gated = gate.gate_batch(batch, KIND)
    stored = {}
    for table in gated.kinds.values():
        for row in table.to_pylist():
            stored[row["_shard_line"]] = {k: v for k, v in row.items() if not k.startswith("_")}
    expected = {}
    for n, line in enumerate(batch.lines, 1):
        outcome = gate.gate_line(line, KIND)
        if outcome.disposition is not Disposition.REJECTED:
            expected[n] = outcome.record
    assert stored == expected
    assert 0 < len(stored) < len(rows)  # some rows rejected, some redacted, some as they were
    assert any(stored[n] != rows[n - 1] for n in stored) is sanitize


def test_pairwise_batch_forms_are_registered_on_the_rules() -> None:
    """The batch forms live beside their rules in the kind's module (one registry)."""
    assert {rule.batch.__module__ for rule in RULES[KIND] if rule.batch} == {pairwise.__name__}
