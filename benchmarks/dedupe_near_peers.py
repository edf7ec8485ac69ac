"""The peers of ``dedupe_near.py``: datasketch's and datatrove's MinHash dedupe, one per process.

Run by ``dedupe_near.py`` with the peers' interpreter (``--peer-python``), which may be a
separate environment without rowgate: this module imports neither ``pipeline`` nor polars,
only the standard library, NumPy and the peer it runs. It reads the texts from the JSONL
file the parent wrote (``{"id": row, "text": key text}`` per line, row order), runs the
peer with the parameters it is given, and writes what the peer found to ``--out`` (``.npy``,
an ``(n, 2)`` int64 array) and its measurements as one JSON line on stdout:

* datasketch: candidate pairs ``(earlier row, later row)``: ``MinHash.update_batch`` per text
  over the set of word 5-gram shingles (``\\w+`` tokens joined by a space), ``MinHashLSH``
  query-then-insert; no verification step.
* datatrove: its four MinHash stages run by ``LocalPipelineExecutor`` (one worker each) in
  ``--work``: signatures (one task over the one input file), buckets (one task per band: the
  stage requires tasks divisible by ``num_buckets``), cluster (one task) and filter (one
  task, writing the kept and the removed documents' ids with their cluster ids). It returns
  clusters, not pairs: the output is ``(member, representative)`` for every removed document,
  the representative being the document of its cluster that datatrove keeps.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

WORD = re.compile(r"\w+")


def peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM belongs to the address space exec created, unlike
    ``ru_maxrss``, which Linux carries over from the forking parent."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Timer:
    """Wall seconds and CPU seconds (user + system, of this process and the children it
    waited for) since it was made: on a shared machine the CPU time is the steadier one."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), _cpu_seconds()

    def elapsed(self) -> dict[str, float]:
        return {
            "seconds": time.perf_counter() - self.wall,
            "cpu_seconds": _cpu_seconds() - self.cpu,
        }


def _cpu_seconds() -> float:
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _edges(left: list[int], right: list[int]) -> np.ndarray:
    return np.array([left, right], dtype=np.int64).T.reshape(-1, 2)


def run_datasketch(texts_path: Path, args: argparse.Namespace) -> tuple[np.ndarray, dict[str, Any]]:
    from datasketch import MinHash, MinHashLSH

    with open(texts_path, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh]
    loaded = peak_rss_mb()
    timer = Timer()
    lsh = MinHashLSH(
        threshold=args.threshold, num_perm=args.permutations, params=(args.bands, args.rows)
    )
    template = MinHash(num_perm=args.permutations, seed=args.seed)
    left, right = [], []
    k = args.shingle_size
    for i, text in enumerate(texts):
        tokens = WORD.findall(text)
        if not tokens:
            continue
        shingles = {" ".join(tokens[j : j + k]) for j in range(max(1, len(tokens) - k + 1))}
        m = MinHash(
            num_perm=args.permutations,
            permutations=template.permutations,
            scheme=template.scheme,
        )
        m.update_batch([s.encode("utf-8") for s in shingles])
        for j in lsh.query(m):
            left.append(j)
            right.append(i)
        lsh.insert(i, m)
    return _edges(left, right), timer.elapsed() | {"loaded_mb": loaded}


def _ids_and_cluster(_writer: object, document: Any) -> dict[str, Any]:
    """datatrove writer adapter: a document's id and cluster id, not its text."""
    return {"id": document.id, "cluster": document.metadata.get("minhash_cluster_id", -1)}


def run_datatrove(texts_path: Path, args: argparse.Namespace) -> tuple[np.ndarray, dict[str, Any]]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.typeshelper import Languages

    work = args.work
    config = MinhashConfig(
        n_grams=args.shingle_size,
        num_buckets=args.bands,
        hashes_per_bucket=args.rows,
        seed=args.seed,
    )

    def reader() -> JsonlReader:
        return JsonlReader(str(texts_path.parent), glob_pattern=texts_path.name)

    stages = {
        "signatures": LocalPipelineExecutor(
            [
                reader(),
                MinhashDedupSignature(
                    str(work / "signatures"), config=config, language=Languages.english
                ),
            ],
            tasks=1, workers=1, logging_dir=str(work / "logs" / "signatures"),
        ),
        "buckets": LocalPipelineExecutor(
            [MinhashDedupBuckets(str(work / "signatures"), str(work / "buckets"), config=config)],
            tasks=config.num_buckets, workers=1, logging_dir=str(work / "logs" / "buckets"),
        ),
        "cluster": LocalPipelineExecutor(
            [
                MinhashDedupCluster(
                    str(work / "buckets"), str(work / "remove"), config=config, save_cluster_id=True
                )
            ],
            tasks=1, workers=1, logging_dir=str(work / "logs" / "cluster"),
        ),
        "filter": LocalPipelineExecutor(
            [
                reader(),
                MinhashDedupFilter(
                    str(work / "remove"),
                    exclusion_writer=JsonlWriter(
                        str(work / "removed"), compression=None, adapter=_ids_and_cluster
                    ),
                    load_cluster_ids=True,
                ),
                JsonlWriter(str(work / "kept"), compression=None, adapter=_ids_and_cluster),
            ],
            tasks=1, workers=1, logging_dir=str(work / "logs" / "filter"),
        ),
    }  # fmt: skip
    loaded = peak_rss_mb()
    stage_seconds = {}
    timer = Timer()
    for name, executor in stages.items():
        began = time.perf_counter()
        executor.run()
        stage_seconds[name] = time.perf_counter() - began
    elapsed = timer.elapsed()
    peak = peak_rss_mb()

    def documents(folder: str) -> list[dict[str, Any]]:
        return [
            json.loads(line)
            for path in sorted((work / folder).glob("*.jsonl"))
            for line in path.read_text().splitlines()
        ]

    representative = {d["cluster"]: d["id"] for d in documents("kept") if d["cluster"] != -1}
    removed = documents("removed")
    members = [int(d["id"]) for d in removed]
    reps = [int(representative[d["cluster"]]) for d in removed]
    measured = elapsed | {"loaded_mb": loaded, "peak_rss_mb": peak}
    return _edges(members, reps), measured | {"stage_seconds": stage_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tool", choices=["datasketch", "datatrove"])
    parser.add_argument("--texts", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, help="datatrove's working folder (empty)")
    parser.add_argument("--threshold", type=float, required=True)
    parser.add_argument("--shingle-size", type=int, required=True)
    parser.add_argument("--permutations", type=int, required=True)
    parser.add_argument("--bands", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    run = run_datasketch if args.tool == "datasketch" else run_datatrove
    edges, measured = run(args.texts, args)
    measured.setdefault("peak_rss_mb", peak_rss_mb())
    np.save(args.out, edges)
    print(json.dumps(measured))


if __name__ == "__main__":
    main()
