"""What a shuffle's small reads cost: one partition read from one task's staged file.

    python benchmarks/shuffle_reads.py                        # 2,400 and 20,000 partitions
    python benchmarks/shuffle_reads.py --partitions 200,2400 --files 20 --repeat 3

Every partitioned step of the global phase is a shuffle: a task per shard stages its
entries cut into P partitions, and a task per partition reads its slice of every
shard's file. So a shuffle makes files × partitions small reads (~36 M at the 1 TB
projection of docs/scale.md, with 14,900 shards and ~2,400 partitions), and what one
read costs beyond its bytes is paid that many times.

This script stages ``--files`` files of a hash check's entries (a line, a 64-bit group
hash and a 32-byte digest a row; ``--rows`` rows a file) both ways, then reads one
partition of every file, for every ``P/50``-th partition, best of ``--repeat``:

* the Arrow IPC file (pyarrow's writer, a record batch per partition, read by opening
  the file and taking batch p: what rowgate staged before), whose footer names every
  batch and is parsed at each open;
* rowgate's partition file (``RunStorage.stage_partitions`` / ``staged_partition``):
  the schema's message, the partitions' messages and their offsets, read by two offsets.

It prints the time to stage a file and the time a (partition, file) read takes, with
their ratios (IPC / rowgate). It measures no target.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from harness import fastest_each, positive, table

from pipeline.storage import RunStorage

_STEM = "k.entries"


def entries(rows: int, partitions: int, seed: int) -> tuple[pa.RecordBatch, list[int]]:
    """A hash check's entries of one file, ordered by partition, and where each begins."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 2**63, rows, dtype=np.uint64)
    partition = group % np.uint64(partitions)
    order = np.argsort(partition, kind="stable")
    starts = np.searchsorted(partition[order], np.arange(partitions + 1, dtype=np.uint64))
    digests = rng.integers(0, 256, (rows, 32), dtype=np.uint8)[order]
    batch = pa.record_batch(
        {
            "_shard_line": pa.array(np.arange(1, rows + 1, dtype=np.int64)[order]),
            "group": pa.array(group[order]),
            "text": pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(32), rows, [None, pa.py_buffer(digests.tobytes())]
            ),
        }
    )
    return batch, starts.tolist()


def stage_ipc(path: Path, batch: pa.RecordBatch, starts: list[int]) -> None:
    with ipc.new_file(pa.OSFile(str(path), "wb"), batch.schema) as out:
        for lo, hi in itertools.pairwise(starts):
            out.write_batch(batch.slice(lo, hi - lo))


def read_ipc(path: Path, partition: int) -> int:
    with ipc.open_file(pa.OSFile(str(path))) as reader:
        return int(reader.get_batch(partition).num_rows)


def measure(partitions: int, files: int, rows: int, repeat: int, root: Path) -> list[object]:
    storage = RunStorage(root / f"p{partitions}")
    staged = [entries(rows, partitions, seed) for seed in range(files)]
    paths = [root / f"p{partitions}-{f}.arrow" for f in range(files)]

    def stage_ipc_files() -> None:
        for path, (batch, starts) in zip(paths, staged, strict=True):
            stage_ipc(path, batch, starts)

    def stage_partition_files() -> None:
        for f, (batch, starts) in enumerate(staged):
            storage.stage_partitions(f, _STEM, batch, starts)

    staging = fastest_each({"ipc": stage_ipc_files, "rowgate": stage_partition_files}, repeat)
    sampled = range(0, partitions, max(1, partitions // 50))
    counts: dict[str, int] = {}

    def ipc_reads() -> None:
        counts["ipc"] = sum(read_ipc(p, q) for q in sampled for p in paths)

    def rowgate_reads() -> None:
        counts["rowgate"] = sum(
            storage.staged_partition(f, _STEM, q).num_rows for q in sampled for f in range(files)
        )

    reads = fastest_each({"ipc": ipc_reads, "rowgate": rowgate_reads}, repeat)
    if counts["ipc"] != counts["rowgate"]:
        raise AssertionError(f"the two formats read {counts}")
    pairs = len(sampled) * files
    per_pair = {name: seconds / pairs * 1e6 for name, seconds in reads.items()}
    per_file = {name: seconds / files * 1e3 for name, seconds in staging.items()}
    return [
        f"{partitions:,}",
        f"{per_file['ipc']:.1f}",
        f"{per_file['rowgate']:.1f}",
        f"{per_file['ipc'] / per_file['rowgate']:.2f}",
        f"{per_pair['ipc']:.0f}",
        f"{per_pair['rowgate']:.0f}",
        f"{per_pair['ipc'] / per_pair['rowgate']:.2f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="2400,20000", help="comma-separated counts")
    parser.add_argument("--files", type=positive, default=40)
    parser.add_argument("--rows", type=positive, default=200_000, help="entries a file")
    parser.add_argument("--repeat", type=positive, default=3)
    args = parser.parse_args()
    counts = [int(p) for p in args.partitions.split(",")]
    if min(counts) < 1:
        parser.error("--partitions: each count must be at least 1")
    with tempfile.TemporaryDirectory(prefix="rowgate-shuffle-") as tmp:
        rows = [measure(p, args.files, args.rows, args.repeat, Path(tmp)) for p in counts]
    print(
        f"{args.files} files of {args.rows:,} entries (a line, a 64-bit hash, a 32-byte "
        f"digest), best of {args.repeat}; reads: every P/50-th partition of every file"
    )
    header = (
        "partitions",
        "stage ms a file: IPC",
        "rowgate",
        "ratio",
        "read µs a pair: IPC",
        "rowgate",
        "ratio",
    )
    print(table(rows, header))


if __name__ == "__main__":
    main()
