"""Every registered record kind has a generator in :mod:`pipeline.testing.synthetic`, and
what it generates passes the gate: a kind without one would escape every test that
enumerates the generators (the fast-path / reference-path parity tests among them)."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from pipeline.core.config import load_campaign
from pipeline.core.reasons import Disposition
from pipeline.gate.gate import Gate
from pipeline.kinds import KINDS
from pipeline.testing.synthetic import GENERATORS, make_record

ROOT = Path(__file__).resolve().parents[2]


def test_every_registered_kind_has_a_generator() -> None:
    assert sorted(set(KINDS) - set(GENERATORS)) == [], "kinds without a generator"
    assert sorted(set(GENERATORS) - set(KINDS)) == [], "generators of no registered kind"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_generated_records_pass_the_gate(kind: str) -> None:
    # a bundled campaign: its reference tables are what some kinds' rules look up
    campaign = "campaign-autoqa.toml" if kind == "autoqa-eval-1" else "campaign.toml"
    gate = Gate(load_campaign(ROOT / "data" / campaign))
    rng = random.Random(7)
    for i in range(5):
        outcome = gate.gate_line(orjson.dumps(make_record(kind, rng, i)), kind)
        assert (outcome.disposition, outcome.kind) == (Disposition.ACCEPTED, kind), outcome.reasons
