"""Helpers for the tests that plant secrets and grep outputs for them."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import orjson

from pipeline.testing.synthetic import DEFECTS, defect_line, make_record, plant_pii

_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


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


def byte_readings(data: bytes) -> Iterator[str]:
    """``data`` read every way a person could: UTF-8 (invalid bytes replaced, or NULs and
    invalid bytes dropped) and UTF-16/UTF-32 in both byte orders at every alignment.
    Independent of the raw screen's own choice of readings, which it checks."""
    wide = (("utf-16-le", 2), ("utf-16-be", 2), ("utf-32-le", 4), ("utf-32-be", 4))
    texts = [
        data.decode("utf-8", "replace"),
        data.replace(b"\x00", b"").decode("utf-8", "ignore"),
        *(
            data[shift:].decode(codec, "ignore").replace("\x00", "")
            for codec, unit in wide
            for shift in range(unit)
        ),
    ]
    for text in texts:
        yield text
        if "\\u" in text:  # JSON escapes: "\\u0040" is '@'
            yield _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


def decoded_texts(value: Any) -> Iterator[str]:
    """Every string in a decoded Parquet value (member names too); bytes (``_raw``) in
    every :func:`byte_readings`."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield from byte_readings(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from decoded_texts(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from decoded_texts(v)
    elif value is not None:
        yield str(value)
