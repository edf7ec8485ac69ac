"""The benchmark scripts that need no peer installed still run (they are not timed here)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _benchmark(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """benchmarks/<name>.py imported as a module, for its pure functions; the scripts
    import ``harness`` as their neighbour, so it is imported first under that name (both
    leave ``sys.modules`` when the test ends)."""
    for module_name in dict.fromkeys(("harness", name)):
        spec = importlib.util.spec_from_file_location(
            module_name, ROOT / "benchmarks" / f"{module_name}.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, module_name, module)
        spec.loader.exec_module(module)
    return module


def _gate_floor(*arguments: str) -> subprocess.CompletedProcess[str]:
    """benchmarks/gate_floor.py on 300 lines, with ``arguments``; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gate_floor.py"), "--lines", "300", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_gate_floor_runs_on_a_small_export() -> None:
    done = _gate_floor("--rounds", "3", "--repeat", "1")
    assert "sum of the required pieces (the floor)" in done.stdout
    assert "gate_batch today" in done.stdout
    lines = done.stdout.splitlines()
    (per_round,) = [line for line in lines if line.startswith("gate_batch / floor per round:")]
    assert len(per_round.split(":")[1].split()) == 3  # one ratio per round
    (target,) = [line for line in lines if line.startswith("gate_batch / floor = ")]
    assert "median of 3 rounds" in target
    assert target.endswith(("(target ≤ 1.25×)  PASS", "(target ≤ 1.25×)  FAIL"))


def test_gate_floor_rejects_no_rounds() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gate_floor.py"), "--rounds", "0"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--rounds: must be at least 1" in done.stderr


def test_gate_floor_ratio_is_taken_per_round_then_its_median(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gate/floor within each round, then the median over rounds: neither the ratio of the
    medians (130/100) nor that of the best times (100/80), which pair a gate and a floor
    timed in different rounds."""
    floor = _benchmark("gate_floor", monkeypatch)
    ratio = floor.ratio_over_rounds([100.0, 200.0, 130.0], [100.0, 150.0, 80.0])
    assert ratio.values == pytest.approx((1.0, 4 / 3, 1.625))
    assert ratio.median == pytest.approx(4 / 3)
    assert ratio.quartiles == pytest.approx(((1.0 + 4 / 3) / 2, (4 / 3 + 1.625) / 2))
    with pytest.raises(ValueError, match="as many rounds"):
        floor.ratio_over_rounds([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least one"):
        floor.ratio_over_rounds([], [])


def test_gate_floor_floor_of_a_round_sums_its_required_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    floor = _benchmark("gate_floor", monkeypatch)
    per_round = {"parse": [10.0, 30.0], "hash": [1.0, 2.0], "orjson alone": [5.0, 5.0]}
    assert floor.floor_per_round(per_round, ["parse", "hash"]) == [11.0, 32.0]
    with pytest.raises(ValueError, match="different numbers of rounds"):
        floor.floor_per_round({"parse": [1.0, 2.0], "hash": [1.0]}, ["parse", "hash"])


def test_gate_floor_judges_the_target_on_the_median(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 1.25× target is judged on the median ratio, not on the best or the worst round."""
    floor = _benchmark("gate_floor", monkeypatch)
    two_rounds_over = floor.Spread((1.10, 1.30, 1.24, 1.40, 1.20))
    assert floor.target_line(two_rounds_over).endswith("(target ≤ 1.25×)  PASS")
    assert "= 1.240×  median of 5 rounds (quartiles 1.20–1.30, range 1.10–1.40)" in (
        floor.target_line(two_rounds_over)
    )
    best_round_under = floor.Spread((1.10, 1.26, 1.27))
    assert floor.target_line(best_round_under).endswith("(target ≤ 1.25×)  FAIL")
    assert floor.target_line(floor.Spread((1.251,))).endswith("FAIL")
    assert "median of 1 round " in floor.target_line(floor.Spread((1.0,)))


def test_fastest_each_interleaves_the_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pass calls every function once, in order, so that a drift of the machine
    reaches them all alike (not all passes of one, then all of the next)."""
    harness = _benchmark("harness", monkeypatch)
    calls: list[str] = []
    best = harness.fastest_each(
        {"floor": lambda: calls.append("floor"), "gate": lambda: calls.append("gate")}, 3
    )
    assert calls == ["floor", "gate"] * 3
    assert set(best) == {"floor", "gate"}
    assert all(0 <= seconds < float("inf") for seconds in best.values())


def test_gate_floor_runs_on_the_json_dumps_layout(tmp_path: Path) -> None:
    export = tmp_path / "export.jsonl"
    done = _gate_floor("--layout", "json", "--keep", str(export), "--rounds", "2")
    assert "gate_batch today" in done.stdout
    first = export.read_bytes().split(b"\n", 1)[0]
    assert b'": ' in first  # json.dumps' separator after a key


def test_dedupe_near_runs_without_its_peers() -> None:
    """benchmarks/dedupe_near.py with datasketch and datatrove skipped: rowgate's row of
    the table, with pair and cluster accuracies against the planted pairs; the bands
    are those of the target recall asked for."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dedupe_near.py"), "--size-mb", "0.5",
         "--skip-datasketch", "--skip-datatrove", "--target-recall", "0.9"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "16 bands × 8 rows" in done.stdout.splitlines()[0]
    header, _rule, *rows = done.stdout.splitlines()[-3:]
    assert "cluster recall" in header
    assert "cluster precision" in header
    assert rows[0].split()[0] == "rowgate"


def test_bench_scale_runs_every_mode_and_size(tmp_path: Path) -> None:
    """bench_scale on a 1 MB export and twice it, local engine: every run succeeds and
    every target is computed (none is n/a). One worker: the steps run in the parent, no
    spawned workers to start."""
    results = tmp_path / "scale.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_scale.py"),
            *("--size-mb", "1", "--sizes", "1,2", "--skip-ray", "--workers", "1"),
            *("--tmp", str(tmp_path), "--json", str(results)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "parent peak RSS MB" in done.stdout
    assert "1× local: near CPU / plain CPU" in done.stdout
    document = json.loads(results.read_text("utf-8"))
    runs = {(r["size"], r["engine"], r["mode"]): r for r in document["runs"]}
    assert set(runs) == {
        (size, "local", mode) for size in (1, 2) for mode in ("plain", "near+normalised")
    }
    for run in runs.values():
        assert run["measurement"]["returncode"] == 0
        assert run["measurement"]["parent_peak_rss"] > 0
        # the CPU of the run (the parent alone, with one worker) is counted
        assert run["measurement"]["cpu_seconds"] > 0
        assert run["lines"] == sum(run["by_disposition"].values())
    # the 2× export is generated at twice the size, not copied (a copy would make half
    # of its lines duplicates): its duplicate share stays that of a generated export
    one, two = runs[(1, "local", "plain")], runs[(2, "local", "plain")]
    assert two["lines"] > 1.5 * one["lines"]
    assert two["by_disposition"]["duplicate"] / two["lines"] < 0.2
    names = [t["name"] for t in document["targets"]]
    assert "1× local: near tree peak RSS" in names
    assert "2×/1× local near+normalised: parent peak RSS" in names
    assert all(t["passed"] is not None for t in document["targets"])
    assert list(tmp_path.iterdir()) == [results]  # its temporary directory is gone
    assert document["repeat"] == 1
    assert all(len(run["walls"]) == 1 for run in runs.values())


def test_bench_scale_combines_tries_by_fastest_time_and_largest_peak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--repeat``: a run's figures are its fastest try's wall, CPU, counts and phase
    timings and its largest peaks, with every try's wall listed; a failed try stands for
    them all, and a count of tries below one is refused."""
    scale = _benchmark("bench_scale", monkeypatch)

    def tried(seconds: float, cpu: float, peak: int, parent: int, code: int = 0) -> object:
        measurement = scale.Measurement("1× local plain", seconds, peak, code, "", parent, cpu)
        return scale.Run(
            1, "local", "plain", measurement, int(seconds), {}, {"gate_s": seconds}, [seconds]
        )

    run = scale.combined(
        [tried(12.0, 20.0, 700, 190), tried(10.0, 21.0, 650, 200), tried(11.0, 19.0, 640, 180)]
    )
    assert run.measurement.seconds == 10.0
    assert run.lines == 10
    assert run.timings == {"gate_s": 10.0}
    assert run.measurement.cpu_seconds == 19.0
    assert (run.measurement.peak_rss, run.measurement.parent_peak_rss) == (700, 200)
    assert run.walls == [12.0, 10.0, 11.0]
    assert scale.row(run)[-1] == "12.0 / 10.0 / 11.0"
    failed = scale.combined([tried(10.0, 20.0, 700, 190), tried(3.0, 1.0, 10, 10, code=4)])
    assert not failed.ok
    assert failed.measurement.seconds == 3.0
    assert failed.walls == [10.0, 3.0]
    with pytest.raises(scale.argparse.ArgumentTypeError):
        scale.positive("0")
    assert scale.positive("3") == 3


def test_near_keys_times_every_step_of_a_rows_keys() -> None:
    """near_keys on 200 rows: each step of the gate's near and normalised keys is timed,
    per row and per byte of key text, on one polars thread, and ``row_keys`` whole."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "near_keys.py"), "--rows", "200", "--repeat", "1"],
        capture_output=True, text=True, timeout=300, check=False,
        env={k: v for k, v in os.environ.items() if k != "POLARS_MAX_THREADS"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("200 rows, key text ")
    assert lines[0].endswith("POLARS_MAX_THREADS=1")
    steps = [line.split("  ")[0] for line in lines[3:]]
    assert steps[0] == "normalise the key fields"
    assert steps[-1] == "row_keys whole (the gate's call)"
    assert "MinHash minima (128 permutations)" in steps
    for line in lines[3:]:
        assert float(line.split()[-2]) >= 0  # µs a row


def test_driver_memory_copies_make_dedupes_duplicates_not_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--copies``: that share of the lines repeat the content of the last line kept
    before them, each under its own task id (exact duplicates, no retry); the planted
    defects pass through as written."""
    driver_memory = _benchmark("driver_memory", monkeypatch)
    harness = _benchmark("harness", monkeypatch)
    export = tmp_path / "export.jsonl"
    harness.write_export(export, 0.5, size=1, transform=driver_memory.copying(0.5))
    plain = tmp_path / "plain.jsonl"
    harness.write_export(plain, 0.5, size=1)

    def counted(path: Path) -> tuple[int, int, int]:
        """The records, their repeated task ids and their repeated contents."""
        ids, contents = [], []
        for line in path.read_bytes().splitlines():
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a planted defect
            if isinstance(record, dict) and "task_id" in record:
                ids.append(record.pop("task_id"))
                contents.append(orjson.dumps(record))
        return len(ids), len(ids) - len(set(ids)), len(contents) - len(set(contents))

    records, retries, copies = counted(export)
    _, plain_retries, plain_copies = counted(plain)
    assert 0.4 < (copies - plain_copies) / records < 0.6
    assert retries <= plain_retries  # a copy is no retry (it may replace one)
    assert driver_memory.copying(0) is None


def _record(line: bytes) -> dict[str, object] | None:
    """A line's record with a task id (a planted defect, or none: None)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) and "task_id" in record else None


def test_driver_memory_reviews_are_runs_of_reviews_of_one_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--reviews 3``: each run of three lines reviews one item (the run's first line's
    conversation and candidates), each line under its own task id, four in five with the
    item's preference; the planted defects pass through as written."""
    driver_memory = _benchmark("driver_memory", monkeypatch)
    harness = _benchmark("harness", monkeypatch)
    export = tmp_path / "export.jsonl"
    harness.write_export(export, 0.5, size=1, transform=driver_memory.reviewing(3))
    items: dict[bytes, list[dict[str, object]]] = {}
    ids = []
    for record in map(_record, export.read_bytes().splitlines()):
        if record is not None:  # not a planted defect
            ids.append(record["task_id"])
            item = orjson.dumps([record[k] for k in ("messages", "response_a", "response_b")])
            items.setdefault(item, []).append(record)
    sizes = [len(reviews) for reviews in items.values()]
    assert sum(s == 3 for s in sizes) > 0.8 * len(sizes)  # (a planted retry makes more)
    plain = tmp_path / "plain.jsonl"
    harness.write_export(plain, 0.5, size=1)
    planted = [r["task_id"] for r in map(_record, plain.read_bytes().splitlines()) if r]
    # each its own task id: the transform adds no retry to those the export plants...
    assert len(ids) - len(set(ids)) == len(planted) - len(set(planted))
    agreeing = [len({r["preference"] for r in reviews}) == 1 for reviews in items.values()]
    assert 0.3 < sum(agreeing) / len(agreeing) < 0.95  # ...and some disagree
    assert driver_memory.reviewing(1) is None


def test_driver_memory_reads_each_step_at_both_sizes(tmp_path: Path) -> None:
    """driver_memory on exports of a few shards each: the gate and every global step the
    run names are measured at both sizes, the growth a row computed, and its temporary
    directory is gone; sizes that would fit one shard (gated in the driver) are refused."""
    script = [sys.executable, str(ROOT / "benchmarks" / "driver_memory.py"), "--tmp", str(tmp_path)]
    done = subprocess.run(
        [*script, "--rows", "2000,4000", "--shard-mb", "0.5", "--near", "--duplicates", "0.1"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("pairwise-v2, near+normalised, 10% repeated lines: ")
    steps = {line.split("  ")[0]: line.split()[-1] for line in lines[3:] if "  " in line}
    for step in ("gate", "pairwise-v2: read", "pairwise-v2: cross_rules", "pairwise-v2: dedupe"):
        float(steps[step])  # a growth a row, measured at both sizes
    assert "pairwise-v2: dedupe: candidates" in steps  # named without its partition count
    assert "pairwise-v2: review" not in steps  # unscored
    assert any(line.startswith("the global phase's peak: ") for line in lines)
    assert any(line.startswith("the global phase's file-backed pages") for line in lines)
    assert list(tmp_path.iterdir()) == []
    refused = subprocess.run(
        [*script, "--rows", "100,200"], capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 2
    assert "two shards at least" in refused.stderr


def test_dedupe_memory_reads_each_step_at_both_sizes(tmp_path: Path) -> None:
    """dedupe_memory on two small datasets: each step ``rowgate dedupe`` names is measured
    at both sizes and the growth a row computed, half the rows are removed (the copies),
    and its temporary directory is gone."""
    script = [sys.executable, str(ROOT / "benchmarks" / "dedupe_memory.py"), "--tmp", str(tmp_path)]
    done = subprocess.run(
        [*script, "--rows", "2000,4000", "--near"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        "rowgate dedupe (--near --normalised, survivor first): 2,000 and 4,000 rows, "
    )
    assert "1,000 and 2,000 removed" in lines[0]
    steps = {line.split("  ")[0]: line.split()[-1] for line in lines[3:] if "  " in line}
    for step in ("dedupe: row keys", "dedupe: match", "dedupe: write"):
        float(steps[step])  # a growth a row, measured at both sizes
    assert list(tmp_path.iterdir()) == []


def test_shuffle_reads_reads_the_same_rows_both_ways() -> None:
    """shuffle_reads on a few small files: both formats staged and every sampled
    partition read back (the script refuses to print when the two read other rows)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "shuffle_reads.py"), "--partitions", "1,60",
         "--files", "3", "--rows", "500", "--repeat", "1"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("3 files of 500 entries")
    assert [line.split()[0] for line in lines[3:]] == ["1", "60"]
    for line in lines[3:]:
        assert all(float(cell) > 0 for cell in line.split()[1:])


def test_stage_memory_applies_a_stage_s_decisions_at_each_size() -> None:
    """stage_memory on two small states: each size's peak and seconds are measured, and
    the script checks that the state after holds the rows decided, and they alone."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "stage_memory.py"), "--rows",
         "128000,320000", "--decided", "0.5"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [
        ["128,000", "64,000"],
        ["320,000", "160,000"],
    ]
