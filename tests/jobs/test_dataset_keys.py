"""``rowgate dedupe`` with its row keys staged on the engine, slice by slice: the same
output files, byte for byte, as the decision over every row's key texts in one process."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.config import DedupeSettings, EngineSettings
from pipeline.dedupe import near_check, survivor_keys
from pipeline.dedupe.table import dense_ids
from pipeline.engines.local import LocalEngine
from pipeline.jobs import dataset_keys
from pipeline.jobs import dedupe as job
from pipeline.jobs.dataset_keys import EXACT, KeySlice, KeyTask, _grouped
from pipeline.storage import RunStorage
from pipeline.testing.corpus import duplicate_corpus
from tests.dedupe_helpers import write_lines

runner = CliRunner()
#: the dedupe command's two row files: every input row is in one of them
_OUTPUTS: Final = ("kept.parquet", "duplicates.parquet")


def _digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())}


def _input_files(args: list[str]) -> list[Path]:
    """The Parquet files the dedupe command's arguments name (a file, a directory of
    them, or ``SPLIT=PATH``)."""
    paths = [Path(a.partition("=")[2] or a) for a in args if not a.startswith("-")]
    return sorted(
        f for p in paths if p.exists() for f in ([p] if p.is_file() else p.rglob("*.parquet"))
    )


def _dedupe(args: list[str], out: Path) -> dict[str, str]:
    result = runner.invoke(app, ["dedupe", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return _digests(out)


@pytest.fixture(scope="module")
def column_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two files of a text column and an id column (one Int64, one UInt64: their common
    type is Int128), with planted exact, normalised and near duplicates, null texts, an
    extra column in one file, task ids some rows of both files share (and some null),
    and row groups of 40 rows."""
    root = tmp_path_factory.mktemp("columns")
    rng = random.Random(3)
    texts: list[str | None] = []
    for row in duplicate_corpus(600, seed=11, duplicate_rate=0.4):
        record = orjson.loads(row.line)
        turns = [m.get("content", "") for m in record.get("messages") or [] if isinstance(m, dict)]
        texts.append(
            None if rng.random() < 0.05 else "\n".join([*turns, str(record.get("response_a"))])
        )
    ids = [rng.randint(0, 2) for _ in texts]  # few: a duplicate often shares its id
    # task ids (the split groups' field): some in both files, some null
    tasks = [None if rng.random() < 0.1 else f"t{rng.randint(0, 500)}" for _ in texts]
    pl.DataFrame(
        {
            "q": texts[:300],
            "id": pl.Series(ids[:300], dtype=pl.Int64),
            "extra": range(300),
            "task_id": tasks[:300],
        }
    ).write_parquet(root / "a.parquet", row_group_size=40)
    pl.DataFrame(
        {"q": texts[300:], "id": pl.Series(ids[300:], dtype=pl.UInt64), "task_id": tasks[300:]}
    ).write_parquet(root / "b.parquet", row_group_size=40)
    return root


@pytest.fixture(scope="module")
def undeduped_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run's accepted pairwise rows, with its dedupe off (so they hold duplicates)."""
    root = tmp_path_factory.mktemp("run")
    write_lines(root / "in.jsonl", list(duplicate_corpus(500, seed=12, duplicate_rate=0.4)))
    config = root / "c.toml"
    config.write_text(
        f'[[inputs]]\npath = "{root / "in.jsonl"}"\nkind = "pairwise-v2"\n\n'
        "[dedupe]\nenabled = false\n\n[engine]\nworkers = 1\n"
    )
    result = runner.invoke(app, ["run", "--config", str(config), "--out", str(root / "out")])
    assert result.exit_code == 0, result.output
    return root / "out" / "accepted"


@pytest.fixture(scope="module")
def reprinted(undeduped_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's rows with fingerprints a dataset may hold: a null one (the exact rule
    then compares keys) in ``null/``, one in capitals (then it compares the strings as
    they are) in ``capital/``; dictionary-encoded (read as a categorical) in
    ``dictionary/``, a column of nulls alone (pyarrow's null type: keys compared) in
    ``nothing/``, and the digests' raw bytes (compared by value over every row, in one
    process) in ``bytes/``."""
    root = tmp_path_factory.mktemp("reprinted")
    rows = pl.read_parquet(undeduped_run / "pairwise-v2")
    fingerprint = pl.col("_content_sha256")
    for name, changed, exact in (
        ("null", pl.when(pl.int_range(pl.len()) == 7).then(None).otherwise(fingerprint), "key"),
        (
            "capital",
            pl.when(pl.int_range(pl.len()) == 7)
            .then(fingerprint.str.to_uppercase())
            .otherwise(fingerprint),
            "fingerprint text",
        ),
    ):
        path = root / name / "rows.parquet"
        path.parent.mkdir()
        rows.with_columns(changed.alias("_content_sha256")).write_parquet(path, row_group_size=100)
        # the exact rule's groups: of the keys; of the fingerprints as strings (digested)
        assert job._exact_digests([job.DatasetInput(str(path))], DedupeSettings(), True) == exact
    table = rows.to_arrow()
    at = table.schema.get_field_index("_content_sha256")
    fingerprints = table.column(at).cast(pa.string())
    for name, column in (
        ("dictionary", fingerprints.dictionary_encode()),
        ("nothing", pa.nulls(table.num_rows)),
        ("bytes", rows["_content_sha256"].str.decode("hex").to_arrow()),  # 32 raw bytes
    ):
        path = root / name / "rows.parquet"
        path.parent.mkdir()
        pq.write_table(table.set_column(at, "_content_sha256", column), path, row_group_size=100)
    return root


@pytest.mark.parametrize(
    "args",
    [
        ["{columns}/a.parquet", "{columns}/b.parquet", "--text", "q", "--key", "id"],
        ["{columns}", "--text", "q", "--no-normalised"],
        ["{columns}", "--text", "q", "--no-normalised", "--no-near"],
        ["--split", "train={columns}/a.parquet", "--split", "eval={columns}/b.parquet",
         "--protect", "eval", "--text", "q", "--survivor", "last"],
        ["--split", "train={columns}/a.parquet", "--split", "eval={columns}/b.parquet",
         "--protect", "eval", "--text", "q", "--no-near"],
        ["--split", "train={columns}/a.parquet", "--split", "eval={columns}/b.parquet",
         "--text", "q", "--no-normalised"],
        ["{run}", "--survivor", "last"],
        ["--split", "train={columns}/a.parquet", "--split", "eval={columns}/b.parquet",
         "--protect", "eval", "--text", "q", "--survivor", "last", "--no-near"],
        # by a column: ids of few values (Int64 and UInt64: compared as Int128); a column
        # one file lacks (null in its rows, which rank last); task ids of a run
        ["--split", "train={columns}/a.parquet", "--split", "eval={columns}/b.parquet",
         "--protect", "eval", "--text", "q", "--survivor", "max:id"],
        ["{columns}", "--text", "q", "--no-near", "--survivor", "max:extra"],
        ["{run}", "--survivor", "min:task_id"],
        # by order keys on disk, read a piece at a time: text with nulls, sorted in
        # ranges of ~1 KB; a column one file lacks
        ["{columns}", "--text", "q", "--survivor", "max:task_id"],
        ["{columns}", "--text", "q", "--survivor", "min:extra"],
        ["{run}", "--kind", "pairwise-v2"],
        ["{run}", "--no-near"],
        ["{run}", "--no-near", "--no-normalised"],
        ["{reprinted}/null", "--kind", "pairwise-v2", "--no-near"],
        ["{reprinted}/capital", "--kind", "pairwise-v2"],
        ["{reprinted}/capital", "--kind", "pairwise-v2", "--no-near", "--no-normalised"],
        ["{reprinted}/dictionary", "--kind", "pairwise-v2", "--no-near", "--no-normalised"],
        ["{reprinted}/nothing", "--kind", "pairwise-v2", "--no-near", "--no-normalised"],
        ["{reprinted}/nothing", "--kind", "pairwise-v2", "--no-near"],
        ["{reprinted}/bytes", "--kind", "pairwise-v2", "--no-near", "--no-normalised"],
    ],
)  # fmt: skip
def test_staged_row_keys_decide_as_the_key_texts_do(
    args: list[str],
    column_dataset: Path,
    undeduped_run: Path,
    reprinted: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every output file is byte-identical to the reference decision's (every row's key
    texts in one frame), with slices of 17 rows cut from row groups of 40 or 100 (so
    many shards, two workers and several partitions; the near rule's exact check in
    ranges of ~4 pair codes and blocks of at most 5 texts), with duplicates found by
    the staged keys' rules."""
    given = [a.format(columns=column_dataset, run=undeduped_run, reprinted=reprinted) for a in args]
    monkeypatch.setattr(job, "KEY_SLICE_BYTES", 1)  # a slice per row group...
    monkeypatch.setattr(job, "KEY_SLICE_ROWS", 17)  # ...cut in pieces of 17 rows
    monkeypatch.setattr(near_check, "BLOCK_TEXTS", 5)
    monkeypatch.setattr(near_check, "SAMPLE_EVERY", 2)
    monkeypatch.setattr(near_check, "RANGE_CODES", 4)
    monkeypatch.setattr(survivor_keys, "PARTITION_BYTES", 1 << 10)  # a text's ranges
    named: list[pl.DataFrame] = []
    split_group_rows = job.split_group_rows

    def spy(*given: object) -> pl.DataFrame:
        named.append(split_group_rows(*given))  # type: ignore[arg-type]
        return named[-1]

    monkeypatch.setattr(job, "split_group_rows", spy)
    inputs = {f: f.read_bytes() for f in _input_files(given)}
    staged = _dedupe(given, tmp_path / "staged")
    # the inputs are unchanged, and each of their rows is in exactly one output
    assert inputs
    assert {f: f.read_bytes() for f in inputs} == inputs
    written = sum(pq.read_metadata(tmp_path / "staged" / name).num_rows for name in _OUTPUTS)
    assert written == sum(pq.read_metadata(f).num_rows for f in inputs)
    with monkeypatch.context() as m:
        m.setattr(job, "_stages_row_keys", lambda *given: False)
        reference = _dedupe(given, tmp_path / "reference")
    assert staged == reference
    duplicates = pl.read_parquet(tmp_path / "staged" / "duplicates.parquet")
    assert duplicates.height > 20
    if "--no-near" not in given:  # found by the staged keys
        assert set(duplicates["_dedupe_rule"]) - {"exact"}
    if "--protect" in given:  # task ids straddle the splits, found on the engine too
        assert pl.read_parquet(tmp_path / "staged" / "split_groups.parquet").height > 5
        # ...among the rows whose task id is in both splits alone
        a, b = (pl.read_parquet(column_dataset / f)["task_id"] for f in ("a.parquet", "b.parquet"))
        both = pl.Series(sorted(set(a.drop_nulls()) & set(b.drop_nulls())))
        assert [n.height for n in named] == [int(a.is_in(both).sum() + b.is_in(both).sum())]


def test_the_decision_reads_no_key_text_no_lineage_and_no_fingerprint(
    column_dataset: Path, undeduped_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the row keys staged (whatever rules are on), the one process that decides
    reads no key column, no lineage and no fingerprint of every row: the grouping checks
    compare digests on the engine, and it reads back the lineage of the rows pointers
    name (the near check's tasks read the texts)."""
    reads: list[list[str]] = []
    original = job._read

    def recording(files, schemas, columns, **options):  # type: ignore[no-untyped-def]
        reads.append(list(columns))
        return original(files, schemas, columns, **options)

    monkeypatch.setattr(job, "_read", recording)
    _dedupe([str(column_dataset), "--text", "q", "--key", "id"], tmp_path / "o")
    assert reads == [[]]  # the rows counted: no column read
    # one worker: the key tasks run here, and the key columns they read are seen
    keyed: list[str] = []
    slice_frame = dataset_keys._slice_frame
    monkeypatch.setattr(
        dataset_keys,
        "_slice_frame",
        lambda job, task: keyed.append(task.path) or slice_frame(job, task),
    )
    for rules in ([], ["--no-near", "--no-normalised"]):  # exact dedupe on fingerprints too
        reads.clear()
        keyed.clear()
        _dedupe([str(undeduped_run), *rules, "--workers", "1"], tmp_path / f"run{len(rules)}")
        assert len(reads) == 1
        assert not {"messages", "response_a", "_source", "_line", "_record_sha256"} & set(reads[0])
        assert "_content_sha256" not in reads[0]
        assert bool(keyed) == (not rules)  # fingerprints alone: no key column read
    # a survivor rule by a column of text or numbers: its order keys are written a piece
    # at a time, not held (a column of Int128, which has none, is held)
    for rule, held in (("max:task_id", []), ("min:extra", []), ("max:id", ["id"])):
        reads.clear()
        _dedupe([str(column_dataset), "--text", "q", "--survivor", rule], tmp_path / rule[4:])
        assert reads == [held]
    monkeypatch.setattr(job, "_stages_row_keys", lambda *given: False)
    reads.clear()
    _dedupe([str(column_dataset), "--text", "q", "--key", "id"], tmp_path / "r")
    assert reads == [["q", "id", "task_id"]]  # the reference reads them: the check can fail


def test_the_matching_holds_only_the_rows_that_take_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The matching decides among the rows that share a group or a near pair alone:
    those of exact, normalised and near copies, never the rows that have none (a
    dataset of distinct texts gives it no row), whatever their number, nor an exact
    copy, which its group's best-ranked row leads (by the survivor rule: first, last,
    or by a column); its removals land at the rows' places among every row."""
    heights: list[int] = []
    original = job.match_duplicates

    def recording(frame, *given):  # type: ignore[no-untyped-def]
        heights.append(frame.height)
        return original(frame, *given)

    monkeypatch.setattr(job, "match_duplicates", recording)
    texts = [" ".join(f"w{i * 40 + j}" for j in range(40)) for i in range(30)]
    texts[5] = texts[2]  # exact
    texts[9] = texts[3].upper()  # normalised
    texts[20] = texts[4] + " more"  # near: one shingle of 37 more
    scores = [0] * 30
    scores[5] = 1  # the exact copy scores higher than its original
    frame = pl.DataFrame({"q": texts, "s": scores})
    frame.write_parquet(tmp_path / "f.parquet", row_group_size=7)
    expected = {  # the removed rows' lines: the exact copy led by its first, its last...
        "first": [6, 10, 21],
        "last": [3, 4, 5],
        "max:s": [3, 10, 21],  # ...its best-scored
        "min:s": [6, 10, 21],
    }
    for rule, lines in expected.items():
        heights.clear()
        out = tmp_path / rule.replace(":", "-")
        _dedupe([str(tmp_path / "f.parquet"), "--text", "q", "--survivor", rule], out)
        assert heights == [5]
        removed = pl.read_parquet(out / "duplicates.parquet")
        assert removed["_line"].to_list() == lines
        assert removed["_dedupe_rule"].to_list() == ["exact", "normalised", "near"]
    heights.clear()
    distinct = [t for i, t in enumerate(texts) if i not in (5, 9, 20)]
    pl.DataFrame({"q": distinct}).write_parquet(tmp_path / "g.parquet", row_group_size=7)
    _dedupe([str(tmp_path / "g.parquet"), "--text", "q"], tmp_path / "p")
    assert heights == [0]


def test_a_slice_that_cannot_be_compared_is_named_from_its_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key column that is no text fails in the key task that reads it (two workers):
    exit 3 naming the column and its type, as when the parent probed it."""
    pl.DataFrame({"ids": [[1], [2], [1]] * 10}).write_parquet(
        tmp_path / "f.parquet", row_group_size=5
    )
    monkeypatch.setattr(job, "KEY_SLICE_BYTES", 1)
    result = runner.invoke(
        app, ["dedupe", str(tmp_path / "f.parquet"), "--key", "ids", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 3, result.output
    assert "ids cannot be compared (ids: List(Int64))" in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("workers", "partitions", "colliding"), [(1, 1, False), (1, 7, True), (2, 64, False)]
)
def test_digest_groups_are_the_dense_ids_of_the_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, partitions: int, colliding: bool
) -> None:
    """Grouped on the engine over tasks' staged digests, with nulls, and with every
    64-bit hash colliding: the rows that share a group of
    :func:`pipeline.dedupe.table.dense_ids` over the digests (no null: each is a group
    of its own), in those groups, numbered as their first rows come."""
    if colliding:
        monkeypatch.setattr(dataset_keys, "_hashed", lambda digest: pl.lit(0, pl.UInt64))
    rng = np.random.default_rng(5)
    pool = [rng.bytes(32) for _ in range(40)]
    values = [
        None if rng.random() < 0.1 else pool[int(rng.integers(len(pool)))] for _ in range(500)
    ]
    storage = RunStorage(tmp_path)
    stem = storage.row_keys_stem("dataset")
    tasks = []
    for shard, lo in enumerate(range(0, 500, 70)):
        part = values[lo : lo + 70]
        table = pa.table(
            {
                EXACT: pa.array(part, pa.binary(32)),
                "_shard_line": pa.array(range(len(part)), pa.int64()),
            }
        )
        storage.stage_table(shard, stem, table)
        tasks.append(KeyTask(shard, (KeySlice("in.parquet", lo, len(part), ()),)))
    settings = EngineSettings(workers=workers, partitions=partitions)
    with LocalEngine.from_settings(settings, len(tasks)) as engine:
        found = _grouped(engine, storage, tasks, EXACT, settings)
    every = dense_ids(pl.DataFrame({"k": pl.Series(values, dtype=pl.Binary)}), pl.col("k"))
    sharing = np.flatnonzero(np.bincount(every)[every] > 1)
    assert found.places.tolist() == sharing.tolist()
    expected = every[sharing]
    pairs = set(zip(found.ids.tolist(), expected.tolist(), strict=True))
    assert len(pairs) == len(set(found.ids.tolist())) == len(set(expected.tolist()))
    assert sorted(set(found.ids.tolist())) == list(range(len(pairs)))  # dense, from 0
    firsts = [int(found.places[found.ids == i].min()) for i in range(len(pairs))]
    assert firsts == sorted(firsts)


def test_the_workers_do_not_change_the_outputs(
    column_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker (the tasks run in the process) or two: the same bytes."""
    monkeypatch.setattr(job, "KEY_SLICE_BYTES", 1)
    given = [str(column_dataset), "--text", "q"]
    one = _dedupe([*given, "--workers", "1"], tmp_path / "one")
    two = _dedupe([*given, "--workers", "2"], tmp_path / "two")
    assert one == two


def test_an_earlier_verdict_is_no_key(tmp_path: Path) -> None:
    """An earlier dedupe's verdict columns are replaced by this one's, so none can be a
    key: exit 3 naming it (a key task read it as data, which the write then dropped)."""
    pl.DataFrame({"q": ["a", "a", "b"], "_dedupe_rule": ["exact", "exact", None]}).write_parquet(
        tmp_path / "f.parquet"
    )
    args = [
        "dedupe",
        str(tmp_path / "f.parquet"),
        "--key",
        "_dedupe_rule",
        "--out",
        str(tmp_path / "o"),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    assert "'_dedupe_rule' is an earlier dedupe's verdict" in result.output
    assert not (tmp_path / "o").exists()


def test_a_path_with_pattern_characters_is_a_file(column_dataset: Path, tmp_path: Path) -> None:
    """``[``, ``*`` and ``?`` in an input's path are its name, never a pattern (reading
    its schema took it for one: "no such file")."""
    odd = tmp_path / "we[ir]d*?"
    odd.mkdir()
    (odd / "a.parquet").write_bytes((column_dataset / "a.parquet").read_bytes())
    _dedupe([str(odd / "a.parquet"), "--text", "q"], tmp_path / "odd")
    _dedupe([str(column_dataset / "a.parquet"), "--text", "q"], tmp_path / "plain")
    for name in ("kept.parquet", "duplicates.parquet"):
        found = pl.read_parquet(tmp_path / "odd" / name)
        assert set(found["_source"]) == {str(odd / "a.parquet")}
        paths = ["_source", "_duplicate_of"]  # both name the file
        plain = pl.read_parquet(tmp_path / "plain" / name)
        assert found.drop(paths, strict=False).equals(plain.drop(paths, strict=False))


def test_small_files_share_a_task(
    column_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thirty files of 20 rows make tasks of two files (at most 50 rows a task), whose
    outputs are the reference decision's, byte for byte."""
    rows = pl.concat(
        [pl.read_parquet(column_dataset / n).select("q") for n in ("a.parquet", "b.parquet")]
    )
    many = tmp_path / "many"
    many.mkdir()
    for i in range(30):
        rows.slice(20 * i, 20).write_parquet(many / f"{i:02d}.parquet")
    monkeypatch.setattr(job, "KEY_SLICE_ROWS", 50)
    files = job._expand([job.DatasetInput(str(many))])
    tasks = job._key_tasks(
        files, [job._schema(f) for f in files], job.resolved_key(None, ("q",), ())
    )
    assert [len(task.pieces) for task in tasks] == [2] * 15
    staged = _dedupe([str(many), "--text", "q"], tmp_path / "staged")
    monkeypatch.setattr(job, "_stages_row_keys", lambda *given: False)
    assert staged == _dedupe([str(many), "--text", "q"], tmp_path / "reference")


def test_small_files_of_several_splits_make_tasks_of_one_split(
    column_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thirty files of 20 rows, three of train, three of eval and so on (exact copies
    within and across the splits): a task joins small files of one split alone, so its
    rows have one label in the exact rule's led check, and the outputs are the
    reference decision's, byte for byte, with eval protected or not, and with the
    survivor rule ``last`` (each group's rows in a split led by their last)."""
    rows = pl.concat(
        [pl.read_parquet(column_dataset / n).select("q") for n in ("a.parquet", "b.parquet")]
    )
    rows = pl.concat([rows, rows.slice(0, 60)])  # copies of the first files' rows
    args = []
    for i in range(30):
        path = tmp_path / "many" / f"{i:02d}.parquet"
        path.parent.mkdir(exist_ok=True)
        rows.slice(22 * i, 22).write_parquet(path)
        args += ["--split", f"{('train', 'eval')[i // 3 % 2]}={path}"]
    monkeypatch.setattr(job, "KEY_SLICE_ROWS", 50)
    files = job._expand([job.DatasetInput(a.split("=", 1)[1], a.split("=")[0]) for a in args[1::2]])
    tasks = job._key_tasks(
        files, [job._schema(f) for f in files], job.resolved_key(None, ("q",), ())
    )
    assert [len(task.pieces) for task in tasks] == [2, 1] * 10
    assert [task.split for task in tasks] == ["train", "train", "eval", "eval"] * 5
    inputs = {f: f.read_bytes() for f in _input_files(args)}
    assert len(inputs) == 30
    for protect in ([], ["--protect", "eval"], ["--survivor", "last"]):
        given = [*args, *protect, "--text", "q"]
        out = tmp_path / f"staged{protect[0] if protect else ''}"
        staged = _dedupe(given, out)
        # the inputs unchanged, and each of their rows in exactly one output
        assert {f: f.read_bytes() for f in inputs} == inputs
        written = sum(pq.read_metadata(out / name).num_rows for name in _OUTPUTS)
        assert written == rows.height
        removed = pl.read_parquet(out / "duplicates.parquet")["_dedupe_rule"]
        assert removed.value_counts()["count"].min() >= 5  # exact copies, led and not
        with monkeypatch.context() as m:
            m.setattr(job, "_stages_row_keys", lambda *given: False)
            assert staged == _dedupe(given, tmp_path / f"reference{protect[0] if protect else ''}")


def test_inputs_whose_columns_do_not_fit_are_named(tmp_path: Path) -> None:
    """A column of one type in one input and of an incompatible one in the next: exit 3
    naming the input that does not fit (the message named none)."""
    data = tmp_path / "data"
    data.mkdir()
    pl.DataFrame({"q": ["x"]}).write_parquet(data / "0.parquet")
    pl.DataFrame({"q": ["a b"], "m": [[1]]}).write_parquet(data / "1.parquet")
    pl.DataFrame({"q": ["c"], "m": [{"a": 1}]}).write_parquet(data / "2.parquet")
    args = ["dedupe", str(data), "--text", "q", "--out", str(tmp_path / "o")]
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    assert f"{data / '2.parquet'}: its columns do not fit the inputs' before it" in result.output
    assert not (tmp_path / "o").exists()


def test_the_exact_check_reads_each_slice_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The candidate texts are read and shingled once, a slice at a time in the order
    they are stored, and the check's blocks gather their staged sets: however many
    blocks the pairs make, no row is read twice. (Read by id, every piece spanned nearly
    every slice: 14.6 times the rows of this dataset; read per block of 16 texts, each
    block read from nearly every slice.)"""
    from pipeline.dedupe import minhash, near_check
    from pipeline.jobs import dataset_keys

    rng = random.Random(1)
    words = [f"w{i}" for i in range(3000)]
    texts = []
    for _ in range(2000):
        base = [rng.choice(words) for _ in range(40)]
        texts += [" ".join(base), " ".join([*base[:-1], rng.choice(words)])]
    rng.shuffle(texts)
    pl.DataFrame({"q": texts}).write_parquet(tmp_path / "a.parquet", row_group_size=500)
    monkeypatch.setattr(job, "KEY_SLICE_ROWS", 500)  # 8 slices
    monkeypatch.setattr(minhash, "_VERIFY_FIRST_TEXTS", 100)  # pieces of a slice
    monkeypatch.setattr(minhash, "_VERIFY_BYTES", 100 * 250)
    monkeypatch.setattr(near_check, "BLOCK_TEXTS", 16)  # ~250 blocks
    rows: list[tuple[str, int]] = []  # (input, row) of each row read (a span's)
    read = dataset_keys._span_frame

    def span(job: object, task: KeySlice, local: np.ndarray) -> pl.DataFrame:
        span = range(task.first + int(local.min()), task.first + int(local.max()) + 1)
        rows.extend((task.path, row) for row in span)
        return read(job, task, local)  # type: ignore[arg-type]

    monkeypatch.setattr(dataset_keys, "_span_frame", span)
    out = tmp_path / "out"
    _dedupe([str(tmp_path / "a.parquet"), "--text", "q", "--workers", "1"], out)
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["dedupe"]["near"]["candidate_pairs"] > 1000
    assert len({row // 500 for _, row in rows}) == 8
    assert len(rows) > 1000
    assert len(set(rows)) == len(rows)


def test_the_rows_taking_part_are_ranked_by_their_order_keys(
    column_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a survivor rule by a column of text or numbers, the matching's frame holds
    no survivor value: the rows taking part are ranked by their order keys on disk
    (``RowKeys.rank``), in the order of their values (the decisions: the parity cases
    above). A column of no type with order keys (a struct) is held instead."""
    seen: list[tuple[list[str], Any]] = []
    original = job.match_duplicates

    def recording(frame, key, settings, name, keys):  # type: ignore[no-untyped-def]
        seen.append((frame.columns, keys.rank))
        return original(frame, key, settings, name, keys)

    monkeypatch.setattr(job, "match_duplicates", recording)
    for rule in ("max:task_id", "min:task_id"):
        seen.clear()
        _dedupe([str(column_dataset), "--text", "q", "--survivor", rule], tmp_path / rule[:3])
        ((columns, rank),) = seen
        assert columns == ["_split"]
        assert rank is not None
        assert len(rank) > 20
        assert sorted(rank.tolist()) == list(range(len(rank)))
    files = [job.DatasetInput(str(column_dataset / "a.parquet"))]
    structs = [pl.Schema({"q": pl.Struct({"a": pl.Int64})})]
    assert job._SurvivorColumn.of(files, structs, {}, "max:q") is None
