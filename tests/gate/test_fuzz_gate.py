"""The fuzz target of the strict parser and the gate (tests/fuzz/): its seed corpus passes,
it catches a fast path that disagrees with the reference path, and a short bounded
coverage-guided run (atheris, in its own process) finds nothing.

A longer run, for a release or after changing the parser or the gate::

    python -m tests.fuzz.seeds /tmp/seeds
    python -m tests.fuzz.gate_target /tmp/corpus /tmp/seeds -dict=tests/fuzz/json.dict \\
        -max_len=65536 -timeout=60 -max_total_time=3600 -artifact_prefix=/tmp/findings/
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from tests.fuzz import gate_target
from tests.fuzz.gate_target import check, encode
from tests.fuzz.seeds import MAX_SEED_BYTES, write_seeds

ROOT: Final = Path(__file__).resolve().parents[2]
#: Runs of the bounded fuzz run in CI: ~20-40 s on one free core (fewer runs per second
#: while other work shares it; the seed corpus is read first).
CI_RUNS: Final = 10_000
#: A backstop for a starved machine; libFuzzer stops there and reports success.
CI_MAX_SECONDS: Final = 300


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("seeds")
    write_seeds(directory)
    return directory


@pytest.mark.slow
def test_every_seed_gates_alike_on_both_paths(seed_dir: Path) -> None:
    """The target's assertions hold on the whole seed corpus, in this process."""
    seeds = sorted(seed_dir.iterdir())
    assert len(seeds) > 100
    for path in seeds:
        check(path.read_bytes())


def test_seeds_hold_the_json_test_suite(seed_dir: Path, conformance: Path) -> None:
    """Every JSONTestSuite file short enough is a seed."""
    lines = {p.read_bytes()[1:] for p in seed_dir.iterdir()}
    suite = sorted((conformance / "json-parsing").glob("*.json"))
    assert suite
    for path in suite:
        data = path.read_bytes()
        assert len(data) >= MAX_SEED_BYTES or data in lines, path.name


def test_the_target_catches_a_fast_path_that_disagrees(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast parser without its proofs (orjson alone keeps the last of repeated keys)
    accepts a record the reference path rejects: the target must fail on it."""
    import orjson

    from pipeline.gate import gate
    from pipeline.records import strict_json

    record = json.loads((ROOT / "tests" / "fixtures" / "seed000_annotation.json").read_bytes())
    line = b'{"schema_version":"pairwise-v2",' + orjson.dumps(record)[1:]
    data = encode(line, "pairwise-v2")
    check(data)  # the real fast path: both say json.duplicate_key
    monkeypatch.setattr(strict_json, "parse_fast", orjson.loads)
    with pytest.raises(AssertionError, match="strict parser rejects"):
        check(data)
    monkeypatch.undo()
    monkeypatch.setattr(gate, "parse_fast", orjson.loads)
    with pytest.raises(AssertionError):
        check(data)


def test_an_integer_beyond_the_conversion_limit_is_a_rejection() -> None:
    """Python refuses int() of more than 4300 digits: a documented rejection
    (json.number_range) on both paths, never an exception."""
    for digits in (4300, 4301, 20_000):
        for declared in (None, "pairwise-v2"):
            check(encode(b'{"a":' + b"7" * digits + b"}", declared))
            check(encode(b'{"a":[-' + b"7" * digits + b"]}", declared, "tight"))


@pytest.mark.slow
@pytest.mark.fuzz
def test_bounded_fuzz_run_finds_nothing(seed_dir: Path, tmp_path: Path) -> None:
    """A fixed number of coverage-guided runs from the seed corpus, seeded, so CI runs
    the same inputs each time. A finding fails the test and names the saved input
    (replay it: ``python -m tests.fuzz.gate_target FILE``)."""
    if importlib.util.find_spec("atheris") is None:
        pytest.skip("atheris is not installed: pip install atheris (Linux x86-64 wheels)")
    findings = tmp_path / "findings"
    findings.mkdir()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    log = tmp_path / "fuzz.log"
    command = [
        sys.executable, "-m", gate_target.__name__, str(corpus), str(seed_dir),
        f"-runs={CI_RUNS}", "-seed=1", f"-max_len={MAX_SEED_BYTES}", "-timeout=60",
        f"-max_total_time={CI_MAX_SECONDS}", f"-dict={ROOT / 'tests' / 'fuzz' / 'json.dict'}",
        f"-artifact_prefix={findings}/", "-print_final_stats=1",
    ]  # fmt: skip
    with open(log, "wb") as output:
        done = subprocess.run(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    saved = sorted(str(p) for p in findings.iterdir())
    if done.returncode != 0 or saved:
        tail = log.read_text(errors="replace")[-3000:]
        pytest.fail(
            f"the fuzz run found a failure (exit {done.returncode}); input saved as "
            f"{', '.join(saved) or '(none)'}; log {log}\n{tail}"
        )
    assert "Done" in log.read_text(errors="replace")
