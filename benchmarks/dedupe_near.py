"""Near-duplicate detection: rowgate's MinHash LSH against datasketch's and datatrove's, in one run.

Generates a labelled pairwise corpus (``pipeline.testing.corpus``: the synthetic export of
``pipeline.testing.synthetic.export_lines(..., size=3)`` with planted exact, reordered,
normalised, near and far duplicates) of about ``--size-mb`` MB in a temporary directory,
builds the pairwise key texts once (the dedupe stage's own normalisation) and writes them
as JSONL documents (``{"id": row, "text": key text}``), the one input of every tool. Each
tool then runs in its own process on those texts with the same parameters (word 5-gram
shingles, permutations, bands × rows, seed, threshold):

* rowgate: ``pipeline.dedupe.minhash.near_pairs`` — signatures, LSH candidates, and the
  exact Jaccard check that drops false positives;
* datasketch: ``MinHash.update_batch`` per text and ``MinHashLSH`` query-then-insert
  (candidates only: datasketch has no verification step);
* datatrove: its four MinHash dedupe stages (signatures → buckets → cluster → filter) on
  ``LocalPipelineExecutor`` with one worker, ``MinhashConfig(n_grams=shingle size,
  num_buckets=bands, hashes_per_bucket=rows, seed=seed)``. It has no threshold (a pair is a
  duplicate when one band matches, and there is no verification) and its own text
  handling: ``simplify_text`` (lower case, punctuation removed, digits folded to 0), the
  English word tokenizer (spaCy's blank ``en``), xxhash64 shingle hashes and 64-bit
  permutations modulo 2^61 − 1; rowgate and datasketch shingle ``\\w+`` tokens of the same
  texts. Its wall includes reading the JSONL twice and writing ids (no text) of the kept
  and removed documents; the others' excludes reading the texts.

The peers run from ``benchmarks/dedupe_near_peers.py``, which imports no ``pipeline``, so
they can live in an environment of their own (``--peer-python``, default this interpreter);
the rowgate worker runs with this interpreter::

    python3.11 -m venv PEERS && PEERS/bin/pip install -r benchmarks/peers-requirements.txt
    python benchmarks/dedupe_near.py --peer-python PEERS/bin/python                  # ≈ 500 MB
    python benchmarks/dedupe_near.py --size-mb 20 --peer-python PEERS/bin/python     # quick

Prints the wall and CPU time (user + system) of the timed part, the worker's peak RSS and
its RSS when the timed part starts (rowgate and datasketch have loaded the texts by then;
datatrove streams them from the file), and two accuracies against the generator's own
labels. Positives are the planted near and far pairs ``(original, variant)`` whose
generator-measured word-shingle Jaccard reaches the threshold; a pair is true when that
Jaccard (of the two records' pairwise texts, measured by the generator's
``shingle_jaccard``) reaches the threshold:

* pairs (rowgate, datasketch): recall = positives among the reported pairs / positives;
  precision = true reported pairs / reported pairs.
* clusters (all three: the column that compares them): each tool's output is turned into
  clusters — rowgate's and datasketch's pairs into connected components whose
  representative is the earliest row (rowgate's ``first`` survivor), datatrove's clusters
  as it returns them, with the document it keeps as representative. Cluster recall =
  positives whose two rows end in the same cluster / positives; cluster precision = true
  pairs among the pairs the clusters imply, ``(member, its cluster's representative)`` for
  every member that is not the representative (one per removed row), / those pairs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import orjson
import polars as pl
from dedupe_near_peers import Timer, peak_rss_mb
from harness import table

from pipeline.core.config import DedupeSettings
from pipeline.dedupe.keys import text_columns
from pipeline.dedupe.minhash import LshParams, near_pairs
from pipeline.dedupe.normalise import Normalisation
from pipeline.kinds import get_kind
from pipeline.testing.corpus import duplicate_corpus, pairwise_text, shingle_jaccard

PEERS = Path(__file__).with_name("dedupe_near_peers.py")

Pair = tuple[int, int]
HEADER = [
    "tool", "wall s", "CPU s", "peak RSS MB", "RSS at start MB", "pairs", "pair recall",
    "pair precision", "rows removed", "cluster recall", "cluster precision",
]  # fmt: skip


def generate(root: Path, size_mb: float, threshold: float, seed: int) -> tuple[Path, Path]:
    """Corpus JSONL → key texts (JSONL documents ``{"id", "text"}``) and labels (Parquet)."""
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
        .select(pl.int_range(pl.len(), dtype=pl.Int64).alias("id"), pl.col("_text").alias("text"))
        .collect()
    )
    # A folder of its own: datatrove reads every JSONL file of its input folder.
    texts_path = root / "texts" / "texts.jsonl"
    texts_path.parent.mkdir()
    texts.write_ndjson(texts_path)
    labels_path = root / "labels.parquet"
    pl.DataFrame(
        labels,
        schema=["row", "label", "source", "similarity", "expected"],
        orient="row",
    ).write_parquet(labels_path)
    print(
        f"corpus: {written / 1e6:.0f} MB, {len(labels):,} rows, "
        f"{texts['text'].str.len_bytes().sum() / 1e6:.0f} MB of key text",
        flush=True,
    )
    return texts_path, labels_path


def rowgate_worker(texts_path: Path, out: Path, params: LshParams) -> None:
    """rowgate's near pairs of the texts → ``out`` (``.npy``), measurements → stdout."""
    texts = pl.read_ndjson(texts_path, schema={"id": pl.Int64, "text": pl.String})["text"]
    loaded = peak_rss_mb()
    timer = Timer()
    near = near_pairs(texts, np.arange(len(texts), dtype=np.int64), params)
    measured = timer.elapsed()
    np.save(out, np.stack([near.left, near.right], axis=1).astype(np.int64))
    print(json.dumps(measured | {"peak_rss_mb": peak_rss_mb(), "loaded_mb": loaded}))


def representatives(pairs: set[Pair]) -> dict[int, int]:
    """Connected components of ``pairs``: each member's component's earliest row, for
    every member that is not that row."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while x != root:
            parent[x], x = root, parent[x]
        return root

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    roots = {x: find(x) for x in parent}
    return {x: r for x, r in roots.items() if x != r}


class Truth:
    """The generator's labels: planted positives, and the shingle Jaccard of any pair
    (measured once, shared by the tools)."""

    def __init__(self, labels: pl.DataFrame, corpus: Path, threshold: float) -> None:
        planted = labels.filter(pl.col("label").is_in(["near", "far"]))
        self.positives = {
            (int(s), int(r))
            for r, s, sim in planted.select("row", "source", "similarity").iter_rows()
            if sim >= threshold
        }
        self.threshold = threshold
        self.lines = corpus.read_bytes().split(b"\n")
        self.known: dict[Pair, bool] = {}

    def true(self, pair: Pair) -> bool:
        """Pairs of rows copied from one original (exact, normalised, …) are equal
        texts, so they count as true pairs."""
        if pair in self.positives:
            return True
        if pair not in self.known:
            a, b = (orjson.loads(self.lines[i]) for i in pair)
            self.known[pair] = shingle_jaccard(pairwise_text(a), pairwise_text(b)) >= self.threshold
        return self.known[pair]

    def precision(self, pairs: set[Pair]) -> float | None:
        return sum(map(self.true, pairs)) / len(pairs) if pairs else None

    def pair_recall(self, pairs: set[Pair]) -> float:
        return len(self.positives & pairs) / len(self.positives) if self.positives else 1.0

    def cluster_recall(self, representative: dict[int, int]) -> float:
        together = sum(
            representative.get(a, a) == representative.get(b, b) for a, b in self.positives
        )
        return together / len(self.positives) if self.positives else 1.0


def _ordered(edges: np.ndarray) -> set[Pair]:
    a, b = edges[:, 0], edges[:, 1]
    return {(int(x), int(y)) for x, y in zip(np.minimum(a, b), np.maximum(a, b), strict=True)}


def _fraction(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=500.0)
    parser.add_argument("--threshold", type=float, default=DedupeSettings().threshold)
    parser.add_argument(
        "--target-recall",
        type=float,
        default=DedupeSettings().target_recall,
        help="dedupe.target_recall: the bands chosen (fewer on templated texts: fewer "
        "candidate pairs, a lower chance of finding a pair at the threshold)",
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--skip-datasketch", action="store_true")
    parser.add_argument("--skip-datatrove", action="store_true")
    parser.add_argument(
        "--peer-python",
        default=sys.executable,
        help="the interpreter that runs datasketch and datatrove (default: this one)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--texts", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    settings = DedupeSettings(threshold=args.threshold, target_recall=args.target_recall)
    params = LshParams.from_settings(settings)
    if args.worker:
        rowgate_worker(args.texts, args.out, params)
        return
    print(
        f"params: threshold {params.threshold}, {params.shingle_size}-word shingles, "
        f"{params.permutations} permutations, {params.bands} bands × {params.rows} rows "
        f"(P[candidate | J = threshold] = {params.candidate_probability(params.threshold):.4f})",
        flush=True,
    )
    shared = [
        "--threshold", str(params.threshold), "--shingle-size", str(params.shingle_size),
        "--permutations", str(params.permutations), "--bands", str(params.bands),
        "--rows", str(params.rows), "--seed", str(params.seed),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rowgate-dedupe-bench-") as tmp:
        root = Path(tmp)
        texts_path, labels_path = generate(root, args.size_mb, args.threshold, args.seed)
        truth = Truth(pl.read_parquet(labels_path), root / "corpus.jsonl", args.threshold)
        rowgate = [
            sys.executable, __file__, "--worker", "--threshold", str(args.threshold),
            "--target-recall", str(args.target_recall),
        ]  # fmt: skip
        commands = {"rowgate": rowgate}
        if not args.skip_datasketch:
            commands["datasketch"] = [args.peer_python, str(PEERS), "datasketch", *shared]
        if not args.skip_datatrove:
            work = root / "datatrove"
            commands["datatrove"] = [
                args.peer_python,
                str(PEERS),
                "datatrove",
                *shared,
                "--work",
                str(work),
            ]
        rows = []
        measured = {}
        for tool, command in commands.items():
            out = root / f"{tool}.npy"
            done = subprocess.run(
                [*command, "--texts", str(texts_path), "--out", str(out)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode:
                sys.exit(f"{tool} worker failed:\n{done.stderr}")
            measured[tool] = json.loads(done.stdout.strip().splitlines()[-1])
            edges = np.load(out)
            if tool == "datatrove":
                pairs = None
                representative = {int(m): int(r) for m, r in edges}
            else:
                pairs = _ordered(edges)
                representative = representatives(pairs)
            implied = {(min(m, r), max(m, r)) for m, r in representative.items()}
            m = measured[tool]
            rows.append([
                tool, f"{m['seconds']:.2f}", f"{m['cpu_seconds']:.2f}", f"{m['peak_rss_mb']:.0f}", f"{m['loaded_mb']:.0f}",
                "—" if pairs is None else f"{len(pairs):,}",
                "—" if pairs is None else _fraction(truth.pair_recall(pairs)),
                "—" if pairs is None else _fraction(truth.precision(pairs)),
                f"{len(representative):,}",
                _fraction(truth.cluster_recall(representative)),
                _fraction(truth.precision(implied)),
            ])  # fmt: skip
            print(f"{tool} done in {m['seconds']:.1f} s", file=sys.stderr, flush=True)
        print(f"{len(truth.positives):,} planted near pairs with Jaccard ≥ the threshold")
        print(table(rows, HEADER))
        if "datatrove" in measured:
            stages = measured["datatrove"]["stage_seconds"]
            print("datatrove stages: " + ", ".join(f"{k} {v:.2f} s" for k, v in stages.items()))
        for peer in ("datasketch", "datatrove"):
            if peer in measured:
                wall, cpu, rss = (
                    measured[peer][k] / measured["rowgate"][k]
                    for k in ("seconds", "cpu_seconds", "peak_rss_mb")
                )
                print(f"{peer} / rowgate: wall {wall:.1f}×, CPU {cpu:.1f}×, peak RSS {rss:.2f}×")


if __name__ == "__main__":
    main()
