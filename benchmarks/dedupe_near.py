"""Near-duplicate detection: rowgate's MinHash LSH against datasketch's, in one run.

Generates a labelled pairwise corpus (``pipeline.testing.corpus``: the synthetic export of
``pipeline.testing.synthetic.export_lines(..., size=3)`` with planted exact, reordered,
normalised, near and far duplicates) of about ``--size-mb`` MB in a temporary directory,
builds the pairwise key texts once (the dedupe stage's own normalisation), then times
each tool in its own process on the same texts with the same parameters (word 5-gram
shingles, permutations, bands × rows, threshold):

* rowgate: ``pipeline.dedupe.minhash.near_pairs`` — signatures, LSH candidates, and the
  exact Jaccard check that drops false positives;
* datasketch: ``MinHash.update_batch`` per text and ``MinHashLSH`` query-then-insert
  (candidates only: datasketch has no verification step).

Prints time, peak RSS, near-pair recall of each against the planted pairs whose
generator-measured Jaccard reaches the threshold, rowgate's precision (reported pairs
whose generator-measured Jaccard reaches the threshold), and the speed ratio::

    python benchmarks/dedupe_near.py                 # ≈ 500 MB
    python benchmarks/dedupe_near.py --size-mb 20    # quick
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import polars as pl

from pipeline.core.config import DedupeSettings
from pipeline.dedupe.keys import text_columns
from pipeline.dedupe.minhash import LshParams, near_pairs
from pipeline.dedupe.normalise import Normalisation
from pipeline.kinds import get_kind
from pipeline.testing.corpus import duplicate_corpus, pairwise_text, shingle_jaccard

WORD = re.compile(r"\w+")


def _peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM belongs to the address space exec created, unlike
    ``ru_maxrss``, which Linux carries over from the forking parent."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def generate(root: Path, size_mb: float, threshold: float, seed: int) -> tuple[Path, Path]:
    """Corpus JSONL → key texts (Parquet) and labels (Parquet)."""
    corpus = root / "corpus.jsonl"
    budget = int(size_mb * 1e6)
    labels = []
    written = 0
    with open(corpus, "wb") as fh:
        for i, row in enumerate(
            duplicate_corpus(10**9, seed=seed, size=3, duplicate_rate=0.1, threshold=threshold)
        ):
            fh.write(row.line + b"\n")
            labels.append((i, row.label, row.source, row.similarity, row.expected))
            written += len(row.line) + 1
            if written >= budget:
                break
    key = get_kind("pairwise-v2").dedupe_key()
    assert key is not None
    texts = (
        pl.scan_ndjson(corpus, infer_schema_length=1000)
        .select(text_columns(key, Normalisation()))
        .collect()
    )
    texts_path = root / "texts.parquet"
    texts.write_parquet(texts_path)
    labels_path = root / "labels.parquet"
    pl.DataFrame(
        labels,
        schema=["row", "label", "source", "similarity", "expected"],
        orient="row",
    ).write_parquet(labels_path)
    print(
        f"corpus: {written / 1e6:.0f} MB, {len(labels):,} rows, "
        f"{texts['_text'].str.len_bytes().sum() / 1e6:.0f} MB of key text",
        flush=True,
    )
    return texts_path, labels_path


def run_rowgate(texts: pl.Series, params: LshParams) -> tuple[np.ndarray, np.ndarray]:
    near = near_pairs(texts, np.arange(len(texts), dtype=np.int64), params)
    return near.left, near.right


def run_datasketch(texts: pl.Series, params: LshParams) -> tuple[np.ndarray, np.ndarray]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(
        threshold=params.threshold,
        num_perm=params.permutations,
        params=(params.bands, params.rows),
    )
    template = MinHash(num_perm=params.permutations, seed=params.seed)
    left, right = [], []
    k = params.shingle_size
    for i, text in enumerate(texts.to_list()):
        tokens = WORD.findall(text)
        if not tokens:
            continue
        shingles = {" ".join(tokens[j : j + k]) for j in range(max(1, len(tokens) - k + 1))}
        m = MinHash(
            num_perm=params.permutations,
            permutations=template.permutations,
            scheme=template.scheme,
        )
        m.update_batch([s.encode("utf-8") for s in shingles])
        for j in lsh.query(m):
            left.append(j)
            right.append(i)
        lsh.insert(i, m)
    return np.array(left, dtype=np.int64), np.array(right, dtype=np.int64)


def worker(tool: str, texts_path: Path, pairs_path: Path, params: LshParams) -> None:
    texts = pl.read_parquet(texts_path)["_text"]
    loaded = _peak_rss_mb()
    started = time.perf_counter()
    left, right = (run_rowgate if tool == "rowgate" else run_datasketch)(texts, params)
    seconds = time.perf_counter() - started
    pl.DataFrame({"a": left, "b": right}).write_parquet(pairs_path)
    print(json.dumps({"seconds": seconds, "peak_rss_mb": _peak_rss_mb(), "loaded_mb": loaded}))


def _pairs(path: Path) -> set[tuple[int, int]]:
    frame = pl.read_parquet(path)
    a, b = frame["a"].to_numpy(), frame["b"].to_numpy()
    return {(int(x), int(y)) for x, y in zip(np.minimum(a, b), np.maximum(a, b), strict=True)}


def evaluate(
    reported: set[tuple[int, int]], labels: pl.DataFrame, corpus: Path, threshold: float
) -> tuple[float, float | None, int]:
    """(recall over planted near pairs, precision of ``reported`` by the generator's own
    Jaccard, planted positives). Pairs of rows copied from one original (exact,
    normalised, …) are equal texts, so they count as true pairs."""
    planted = labels.filter(pl.col("label").is_in(["near", "far"]))
    positives = {
        (int(s), int(r))
        for r, s, sim in planted.select("row", "source", "similarity").iter_rows()
        if sim >= threshold
    }
    recall = len(positives & reported) / len(positives) if positives else 1.0
    lines = corpus.read_bytes().split(b"\n")
    unknown = [p for p in reported if p not in positives]
    true = len(reported) - len(unknown)
    for a, b in unknown:
        ra, rb = orjson.loads(lines[a]), orjson.loads(lines[b])
        if shingle_jaccard(pairwise_text(ra), pairwise_text(rb)) >= threshold:
            true += 1
    precision = true / len(reported) if reported else None
    return recall, precision, len(positives)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=500.0)
    parser.add_argument("--threshold", type=float, default=DedupeSettings().threshold)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--skip-datasketch", action="store_true")
    parser.add_argument("--worker", choices=["rowgate", "datasketch"], help=argparse.SUPPRESS)
    parser.add_argument("--texts", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pairs", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    params = LshParams.from_settings(DedupeSettings(threshold=args.threshold))
    if args.worker:
        worker(args.worker, args.texts, args.pairs, params)
        return
    print(
        f"params: threshold {params.threshold}, {params.shingle_size}-word shingles, "
        f"{params.permutations} permutations = {params.bands} bands × {params.rows} rows "
        f"(P[candidate | J = threshold] = {params.candidate_probability(params.threshold):.4f})",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="rowgate-dedupe-bench-") as tmp:
        root = Path(tmp)
        texts_path, labels_path = generate(root, args.size_mb, args.threshold, args.seed)
        labels = pl.read_parquet(labels_path)
        tools = ["rowgate"] + ([] if args.skip_datasketch else ["datasketch"])
        results = {}
        for tool in tools:
            pairs_path = root / f"pairs-{tool}.parquet"
            done = subprocess.run(
                [sys.executable, __file__, "--worker", tool, "--texts", str(texts_path),
                 "--pairs", str(pairs_path), "--threshold", str(args.threshold)],
                capture_output=True, text=True,
            )  # fmt: skip
            if done.returncode:
                sys.exit(f"{tool} worker failed:\n{done.stderr}")
            measured = json.loads(done.stdout.strip().splitlines()[-1])
            recall, precision, positives = evaluate(
                _pairs(pairs_path), labels, root / "corpus.jsonl", args.threshold
            )
            measured |= {"recall": recall, "precision": precision, "pairs": len(_pairs(pairs_path))}
            results[tool] = measured
            print(
                f"{tool:>10}: {measured['seconds']:8.2f} s  peak RSS {measured['peak_rss_mb']:7.0f} MB"
                f" (texts loaded: {measured['loaded_mb']:.0f} MB)  pairs {measured['pairs']:>8,}"
                f"  recall {recall:.4f}"
                + (f"  precision {precision:.4f}" if precision is not None else "")
                + f"  ({positives:,} planted near pairs ≥ threshold)",
                flush=True,
            )
        if "datasketch" in results:
            ratio = results["datasketch"]["seconds"] / results["rowgate"]["seconds"]
            rss = results["datasketch"]["peak_rss_mb"] / results["rowgate"]["peak_rss_mb"]
            print(f"rowgate is {ratio:.1f}× faster than datasketch (peak RSS ratio {rss:.2f})")


if __name__ == "__main__":
    main()
