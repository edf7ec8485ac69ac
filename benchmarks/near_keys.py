"""What a row's near and normalised keys cost in the gate, step by step.

    python benchmarks/near_keys.py                  # 8,000 pairwise-v2 rows (size 4: ~3.3 KB a line)
    python benchmarks/near_keys.py --rows 2000 --repeat 3

The gate computes each row's dedupe keys when a run's normalised or near rule is on
(``pipeline.dedupe.row_keys.row_keys``): the key fields normalised (NFC, whitespace and
case folding), the normalised key's SHA-256, the key text's word tokens, their 5-word
shingles' 64-bit hashes, and the MinHash signature (128 minima). This script times each
step alone, with the very functions the gate calls (the signatures' vectorised steps too,
which the gate's compiled kernels replace: ``pipeline.dedupe.kernels``), over the key columns of generated
pairwise-v2 rows (the scale benchmark's export: ``size=4``), on one thread
(``POLARS_MAX_THREADS=1``, as in a gate worker that shares the machine with others), best
of ``--repeat``; then ``row_keys`` whole. Each step's time is also given per byte of key
text, beside two single polars passes over those bytes (a scan that finds no NUL, and a
rewrite into new strings: lower case), so that a step's distance from what one pass
costs shows.

It answers where the near run's extra gate time goes (docs/scale-measurements.md, "The
near run's gate"); it measures no target.
"""

from __future__ import annotations

import os

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # before polars is imported

import argparse
from collections.abc import Callable
from typing import TypeVar

import orjson
import polars as pl
from harness import fastest, positive, table

from pipeline.core.config import DedupeSettings
from pipeline.dedupe import minhash
from pipeline.dedupe.keys import key_columns, normalised_parts, text_columns
from pipeline.dedupe.normalise import Normalisation
from pipeline.dedupe.row_keys import row_keys, sha256s
from pipeline.kinds import get_kind
from pipeline.testing.synthetic import export_lines

T = TypeVar("T")


def payload(rows: int) -> pl.DataFrame:
    """The key columns of ``rows`` valid generated pairwise-v2 records."""
    records = [orjson.loads(line) for line in export_lines("pairwise-v2", rows, seed=3, size=4)]
    key = get_kind("pairwise-v2").dedupe_key()
    assert key is not None
    return pl.DataFrame([{c: r.get(c) for c in key.columns} for r in records])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=positive, default=8000)
    parser.add_argument("--repeat", type=positive, default=5)
    args = parser.parse_args()

    frame = payload(args.rows)
    key = get_kind("pairwise-v2").dedupe_key()
    assert key is not None
    settings = DedupeSettings(normalised=True, near=True)
    norm = Normalisation.from_settings(settings)
    params = minhash.LshParams.from_settings(settings)
    a, b = params.permutation_coefficients()
    n = frame.height
    steps: list[tuple[str, float]] = []

    def step(name: str, fn: Callable[[], T]) -> T:
        result = fn()  # what the next steps read; then timed
        steps.append((name, fastest(fn, args.repeat)))
        return result

    parts = step("normalise the key fields", lambda: frame.select(normalised_parts(key, norm)))
    exprs = [pl.col(c) for c in parts.columns]
    keys = step(
        "the normalised key",
        lambda: parts.select(key_columns(key, norm, parts=exprs, absent=True)).to_series(),
    )
    step("its SHA-256", lambda: sha256s(keys.to_arrow()))
    texts = step(
        "the key text", lambda: parts.select(text_columns(key, norm, parts=exprs)).to_series()
    )
    nbytes = int(texts.str.len_bytes().sum())
    step("(a scan of the text's bytes: find a NUL)", lambda: texts.str.contains("\0", literal=True))
    step("(a rewrite of the text's bytes: lower case)", lambda: texts.str.to_lowercase())
    spaced = step(
        "tokens: separators to spaces", lambda: texts.str.replace_all(minhash._NOT_TOKEN, " ")
    )
    pieces = step("tokens: split at spaces", lambda: spaced.str.split(" ").explode())
    step(
        "tokens: each coded in the text's vocabulary",
        lambda: pieces.cast(pl.Categorical(pl.Categories.random())).to_physical(),
    )
    step("tokens (all of the above)", lambda: minhash._tokens(texts))
    shingles = step(
        "shingle hashes (tokens included)",
        lambda: minhash.shingle_hashes(texts, params.shingle_size, params.seed),
    )
    step("MinHash minima (128 permutations)", lambda: minhash._text_minima(shingles, a, b))
    step(
        "signatures, vectorised (the steps above, by chunk: the reference)",
        lambda: minhash.signatures(texts, params, compiled=False),
    )
    step(
        "signatures, compiled (numba: what the gate calls)",
        lambda: minhash.signatures(texts, params, compiled=True),
    )
    step("row_keys whole (the gate's call)", lambda: row_keys(frame, key, settings))

    rows = [
        (name, f"{seconds * 1e6 / n:.1f}", f"{seconds * 1e9 / nbytes:.2f}")
        for name, seconds in steps
    ]
    print(
        f"{n:,} rows, key text {nbytes / n:,.0f} bytes a row, {len(shingles.hashes) / n:.0f} "
        f"shingles a row; best of {args.repeat}, POLARS_MAX_THREADS="
        f"{os.environ['POLARS_MAX_THREADS']}"
    )
    print(table(rows, ("step", "µs a row", "ns a byte of key text")))


if __name__ == "__main__":
    main()
