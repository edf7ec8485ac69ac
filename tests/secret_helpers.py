"""Helpers for the tests that plant secrets and grep outputs for them."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import orjson

from pipeline.sanitize.raw import readings
from pipeline.synthetic import DEFECTS, defect_line, make_record, plant_pii


def planted_pairwise(rng: random.Random, count: int) -> tuple[list[bytes], list[str]]:
    """``count`` pairwise-v2 lines, every other one with a secret of every category
    planted, then one line of every defect class (every rejection), secrets inside.
    Returns the lines and the planted values."""
    secrets: list[str] = []
    lines: list[bytes] = []
    for i in range(count):
        record = make_record("pairwise-v2", rng, i)
        if i % 2 == 0:
            record, planted = plant_pii(record, rng, i)
            secrets += planted
        lines.append(orjson.dumps(record))
    for n, defect in enumerate(sorted(DEFECTS)):
        record, planted = plant_pii(make_record("pairwise-v2", rng, 500 + n), rng, 500 + n)
        secrets += planted
        lines.append(defect_line(defect, record))
    return lines, secrets


def decoded_texts(value: Any) -> Iterator[str]:
    """Every string in a decoded Parquet value (member names too); bytes (``_raw``) in
    every reading the raw screen knows (UTF-8, UTF-16, UTF-32, bytes dropped)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield from readings(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from decoded_texts(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from decoded_texts(v)
    elif value is not None:
        yield str(value)
