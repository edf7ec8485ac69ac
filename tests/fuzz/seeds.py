"""The fuzz target's seed corpus, generated: lines of every bundled export in data/ (as
written and in ``json.dumps``' layout, declared and routed by themselves), one line of
every gate defect class, and every JSONTestSuite file when ``../shared`` is present.

    python -m tests.fuzz.seeds SEED_DIR
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import zstandard

from tests.fuzz.gate_target import CAMPAIGNS, declared_kinds, encode

ROOT: Final = Path(__file__).resolve().parent.parent.parent
DATA: Final = ROOT / "data"
JSON_PARSING: Final = ROOT.parent / "shared" / "conformance" / "json-parsing"
#: Lines taken from each bundled export: enough for every kind's shapes, few enough
#: that the fuzzer spends its runs mutating rather than reading seeds.
LINES_PER_EXPORT: Final = 6
#: Longer seeds are left out (the CI run's ``-max_len``; a longer run may raise both).
MAX_SEED_BYTES: Final = 16 * 1024


def _export_lines(path: Path) -> list[bytes]:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    elif path.name.endswith(".zst"):
        raw = zstandard.ZstdDecompressor().stream_reader(raw).read()
    return raw.splitlines()


def _declared(path: Path) -> str | None:
    """The kind an export of data/ is declared as (its file is named after it), if any."""
    stem = path.name.split(".")[0]
    for kind in declared_kinds():
        if kind is not None and stem.replace("-", "") == kind.replace("-", ""):
            return kind
    return None


def seeds() -> Iterator[bytes]:
    """Every seed input (selector byte + line), duplicates possible."""
    from pipeline.testing.synthetic import DEFECTS, defect_line, json_dumps_layout

    for n, path in enumerate(sorted(DATA.glob("*.jsonl*"))):
        declared = _declared(path)
        for i, line in enumerate(_export_lines(path)[:LINES_PER_EXPORT]):
            campaign = CAMPAIGNS[(n + i) % len(CAMPAIGNS)]
            yield encode(line, declared, campaign)
            yield encode(json_dumps_layout(line), None, campaign)
    example = json.loads((ROOT / "tests" / "fixtures" / "seed000_annotation.json").read_bytes())
    for n, defect in enumerate(sorted(DEFECTS)):
        yield encode(defect_line(defect, example), None, CAMPAIGNS[n % len(CAMPAIGNS)])
    if JSON_PARSING.is_dir():
        for n, path in enumerate(sorted(JSON_PARSING.glob("*.json"))):
            yield encode(path.read_bytes(), None, CAMPAIGNS[n % len(CAMPAIGNS)])


def write_seeds(directory: Path) -> int:
    """Write the seed corpus into ``directory`` (one file per distinct seed, named by its
    SHA-1 as libFuzzer names inputs); return how many."""
    directory.mkdir(parents=True, exist_ok=True)
    written = set()
    for seed in seeds():
        if len(seed) > MAX_SEED_BYTES:
            continue
        name = hashlib.sha1(seed).hexdigest()
        if name not in written:
            (directory / name).write_bytes(seed)
            written.add(name)
    return len(written)


if __name__ == "__main__":
    if not JSON_PARSING.is_dir():
        print(f"JSONTestSuite not found at {JSON_PARSING}: seeds from data/ only")
    print(write_seeds(Path(sys.argv[1])), "seeds in", sys.argv[1])
