"""``rowgate run --split/--protect`` and ``rowgate dedupe`` on Parquet, through typer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.testing.corpus import LabelledRow, duplicate_corpus
from tests.dedupe_helpers import write_lines

runner = CliRunner()


@pytest.fixture(scope="module")
def corpus() -> list[LabelledRow]:
    return list(duplicate_corpus(400, seed=4, duplicate_rate=0.3))


@pytest.fixture(scope="module")
def split_run(corpus: list[LabelledRow], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("split")
    write_lines(root / "train.jsonl", corpus[:300])
    write_lines(root / "eval.jsonl", corpus[300:] + corpus[:20])
    out = root / "out"
    result = runner.invoke(
        app,
        ["run", "--split", f"train={root / 'train.jsonl'}", "--split",
         f"eval={root / 'eval.jsonl'}", "--protect", "eval", "--out", str(out), "--workers", "1",
         "--normalised", "--near"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "dedupe.contamination" in result.stdout
    return out


@pytest.mark.slow
def test_run_labels_splits_and_protects_one(split_run: Path) -> None:
    manifest = json.loads((split_run / "manifest.json").read_text())
    assert {i["split"] for i in manifest["inputs"]} == {"train", "eval"}
    assert manifest["config"]["dedupe"]["protected_splits"] == ["eval"]
    assert manifest["global"]["dedupe"]["pairwise-v2"]["contaminated"] >= 20


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--split", "nolabel.jsonl"], 2, "expected SPLIT=PATH"),
        (["--split", "=a.jsonl"], 2, "expected SPLIT=PATH"),
        (["x.jsonl", "--protect", "eval"], 2, "no input is labelled with split 'eval'"),
    ],
)
def test_run_split_errors(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    (tmp_path / "x.jsonl").write_bytes(b"{}\n")
    result = runner.invoke(app, ["run", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == code, result.output
    assert message in result.output


def test_dedupe_a_runs_accepted_output_again(split_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "d"
    result = runner.invoke(app, ["dedupe", str(split_run / "accepted"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    accepted = pl.read_parquet(split_run / "accepted" / "pairwise-v2")
    # the run already removed every duplicate: nothing left to find
    assert summary["counts"] == {"rows": accepted.height, "kept": accepted.height, "duplicates": 0}
    assert summary["kind"] == "pairwise-v2"
    kept = pl.read_parquet(out / "kept.parquet")
    assert kept.select("_source", "_line").equals(accepted.select("_source", "_line"))


def test_dedupe_a_run_directory_reads_its_accepted_rows(split_run: Path, tmp_path: Path) -> None:
    """A run's OUT stands for its accepted/ rows: its rejected, duplicates and dedupe
    tables are no data (they were deduped as rows before)."""
    whole, accepted = tmp_path / "whole", tmp_path / "accepted"
    for source, out in ((split_run, whole), (split_run / "accepted", accepted)):
        result = runner.invoke(app, ["dedupe", str(source), "--out", str(out)])
        assert result.exit_code == 0, result.output
    assert (whole / "kept.parquet").read_bytes() == (accepted / "kept.parquet").read_bytes()
    listed = json.loads((whole / "summary.json").read_text())["inputs"]
    assert listed
    assert all("/accepted/" in item["path"] for item in listed)


def test_a_dedupe_output_as_a_dataset_is_the_rows_it_kept(tmp_path: Path) -> None:
    """A dedupe's OUT given as a dataset stands for its kept.parquet: its clusters,
    split groups and duplicates tables were read as rows of data (``_source`` the
    table), exit 0. A dataset holding a summary.json of its own is read whole."""
    data = tmp_path / "d2in"
    data.mkdir()
    frame = pl.DataFrame({"text": ["a b c d", "a b c d", "x y z"], "id": [1, 2, 3]})
    frame.write_parquet(data / "a.parquet")
    frame.write_parquet(data / "b.parquet")
    first, second = tmp_path / "dA", tmp_path / "dB"
    for source, out in ((data, first), (first, second)):
        result = runner.invoke(app, ["dedupe", str(source), "--text", "text", "--out", str(out)])
        assert result.exit_code == 0, result.output
    summary = json.loads((second / "summary.json").read_text())
    assert [item["path"] for item in summary["inputs"]] == [str(first / "kept.parquet")]
    assert summary["counts"] == {"rows": 2, "kept": 2, "duplicates": 0}
    kept = pl.read_parquet(second / "kept.parquet")
    assert kept.select("text", "id", "_source", "_line").equals(
        pl.read_parquet(first / "kept.parquet").select("text", "id", "_source", "_line")
    )
    (data / "summary.json").write_text('{"format": "my-export/2"}')
    result = runner.invoke(
        app, ["dedupe", str(data), "--text", "text", "--out", str(tmp_path / "dC")]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "dC" / "summary.json").read_text())["counts"]["rows"] == 6
    (first / "kept.parquet").unlink()
    result = runner.invoke(
        app, ["dedupe", str(first), "--text", "text", "--out", str(tmp_path / "dD")]
    )
    assert result.exit_code == 3, result.output
    assert "a rowgate dedupe output without its kept.parquet" in result.output


def test_dedupe_of_jsonl_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "sft.jsonl"
    path.write_text('{"question": "a"}\n')
    result = runner.invoke(
        app, ["dedupe", str(path), "--text", "question", "--out", str(tmp_path / "d")]
    )
    assert result.exit_code == 3, result.output
    assert "reads Parquet" in result.output
    assert "rowgate run" in result.output
    assert "out of specification" not in result.output
    assert not (tmp_path / "d").exists()


def test_dedupe_reproduces_the_run_on_its_inputs(split_run: Path, tmp_path: Path) -> None:
    # everything the run wrote as typed rows, deduped again with the same settings
    out = tmp_path / "d"
    train = tmp_path / "train.parquet"
    eval_ = tmp_path / "eval.parquet"
    rows = pl.concat(
        [
            pl.read_parquet(split_run / "accepted" / "pairwise-v2"),
            pl.read_parquet(split_run / "duplicates" / "pairwise-v2").drop(
                "_duplicate_of",
                "_dedupe_rule",
                "_dedupe_cluster",
                "_similarity_estimated",
                "_similarity_verified",
            ),
        ]
    ).sort("_source", "_line")
    rows.filter(pl.col("_source").str.ends_with("train.jsonl")).write_parquet(train)
    rows.filter(pl.col("_source").str.ends_with("eval.jsonl")).write_parquet(eval_)
    result = runner.invoke(
        app,
        ["dedupe", "--split", f"eval={eval_}", "--split", f"train={train}", "--protect", "eval",
         "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    mine = pl.read_parquet(out / "duplicates.parquet").sort("_source", "_line")
    theirs = pl.read_parquet(split_run / "duplicates" / "pairwise-v2").sort("_source", "_line")
    # eval.parquet sorts before train.parquet as eval.jsonl before train.jsonl: same order key
    assert mine.select("_source", "_line", "_duplicate_of", "_dedupe_rule").equals(
        theirs.select("_source", "_line", "_duplicate_of", "_dedupe_rule")
    )
    assert (out / "clusters.parquet").is_file()


def test_dedupe_foreign_parquet_by_columns(tmp_path: Path) -> None:
    frame = pl.DataFrame(
        {
            "id": [1, 2, 3, 4, 5],
            "question": ["What is 2+2?", "what is  2+2?", "Name a colour.", "What is 2+2?", "x"],
            "source_doc": ["a", "a", "b", "c", "d"],
            "score": [1, 9, 3, 4, 5],
        }
    )
    path = tmp_path / "foreign.parquet"
    frame.write_parquet(path)
    out = tmp_path / "d"
    result = runner.invoke(
        app,
        ["dedupe", str(path), "--text", "question", "--key", "source_doc", "--survivor",
         "max:score", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    duplicates = pl.read_parquet(out / "duplicates.parquet")
    # rows 1 and 2 are the same question from doc "a"; row 2 has the higher score
    assert duplicates["id"].to_list() == [1]
    assert duplicates["_duplicate_of"].to_list() == [
        {"_source": str(path), "_line": 2, "_record_sha256": None}
    ]
    assert duplicates["_dedupe_rule"].to_list() == ["normalised"]
    assert pl.read_parquet(out / "kept.parquet")["id"].to_list() == [2, 3, 4, 5]


def test_key_columns_are_compared_exactly_by_the_near_rule_too(tmp_path: Path) -> None:
    """The near rule shingled ``--key`` columns with the text: ids ``doc-1`` and ``doc.1``
    were near duplicates (J = 1.0), and one body in three languages was two near
    duplicates of the first (J = 0.88). Near duplicates now share their key columns,
    and within a key the similarity is that of the texts alone."""
    body = " ".join(f"word{i}" for i in range(40))
    edited = body.replace("word39", "changed")
    frame = pl.DataFrame(
        {
            "id": ["doc-1", "doc.1", "doc 1", "DOC-2", "doc-5", "doc-6"],
            "body": [body, body, body, edited, "x", "y"],
            "lang": ["en", "fr", "de", "en", "en", "en"],
        }
    )
    path = tmp_path / "rows.parquet"
    frame.write_parquet(path)

    def removed(*args: str) -> pl.DataFrame:
        out = tmp_path / f"d{len(list(tmp_path.iterdir()))}"
        result = runner.invoke(app, ["dedupe", str(path), *args, "--out", str(out)])
        assert result.exit_code == 0, result.output
        return pl.read_parquet(out / "duplicates.parquet")

    assert removed("--key", "id").height == 0
    by_language = removed("--text", "body", "--key", "lang")
    assert by_language["id"].to_list() == ["DOC-2"]  # the edit, in the first row's language
    assert by_language["_dedupe_rule"].to_list() == ["near"]
    alone = removed("--text", "body")  # without a key: the copies, and the edit
    assert alone["id"].to_list() == ["doc.1", "doc 1", "DOC-2"]
    assert by_language["_similarity_verified"][0] == alone["_similarity_verified"][2]


def test_a_row_with_no_key_duplicates_no_other(tmp_path: Path) -> None:
    """A row whose key columns are all null has no key: it is no duplicate of another
    such row by any rule (they shared one before, and all but the first went to
    duplicates); a row with some key columns null is compared on the rest."""
    frame = pl.DataFrame(
        {
            "id": [1, 2, 3, 4, 5, 6],
            "question": [None, None, "What is 2+2?", "what is  2+2?", None, "Name a colour."],
            "source_doc": [None, None, None, None, "a", None],
        }
    )
    path = tmp_path / "nulls.parquet"
    frame.write_parquet(path)
    for rules in (["--no-normalised", "--no-near"], ["--no-near"], []):
        out = tmp_path / f"d{len(rules)}"
        result = runner.invoke(
            app,
            ["dedupe", str(path), "--text", "question", "--key", "source_doc", *rules,
             "--out", str(out)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        removed = pl.read_parquet(out / "duplicates.parquet")["id"].to_list()
        # 3 and 4 share a question once normalised (and no source); 1, 2 have no key
        assert removed == ([] if len(rules) == 2 else [4]), rules
        assert pl.read_parquet(out / "kept.parquet").height == 6 - len(removed)


def test_rows_of_another_kind_are_no_duplicates_of_each_other(tmp_path: Path) -> None:
    """A run's output of several kinds deduped with one kind's key: the other kinds' rows
    have none of its key columns (pairwise's responses are a list of two nulls), so they
    have no key and stay kept; before, all but one of them went to duplicates."""
    from tests.conftest import DATA

    out = tmp_path / "run"
    result = runner.invoke(
        app, ["run", "--config", str(DATA / "campaign.toml"), "--out", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    deduped = tmp_path / "d"
    result = runner.invoke(
        app, ["dedupe", str(out), "--kind", "pairwise-v2", "--out", str(deduped)]
    )
    assert result.exit_code == 0, result.output
    duplicates = pl.read_parquet(deduped / "duplicates.parquet")
    assert set(duplicates["_kind"].to_list()) <= {"pairwise-v2"}


def test_dedupe_keeps_the_highest_rubric_score_then_the_first(tmp_path: Path) -> None:
    """A scored run's rows carry ``_weighted_score``: ``max:_weighted_score`` keeps the
    highest-scored row of each group, the first of equal scores, and an unscored row
    (null score) only when no row of its group is scored."""
    frame = pl.DataFrame(
        {
            "id": [1, 2, 3, 4, 5, 6, 7],
            "prompt": ["a b c", "a b c", "a b c", "d e f", "d e f", "g h i", "g h i"],
            "_weighted_score": [0.4, 0.9, 0.9, None, 0.1, None, None],
        }
    )
    path = tmp_path / "scored.parquet"
    frame.write_parquet(path)
    out = tmp_path / "d"
    result = runner.invoke(
        app,
        ["dedupe", str(path), "--text", "prompt", "--survivor", "max:_weighted_score",
         "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert pl.read_parquet(out / "kept.parquet")["id"].to_list() == [2, 5, 6]
    duplicates = pl.read_parquet(out / "duplicates.parquet").sort("id")
    assert duplicates["id"].to_list() == [1, 3, 4, 7]
    assert [d["_line"] for d in duplicates["_duplicate_of"]] == [2, 2, 5, 6]


def test_dedupe_copies_rows_a_slice_at_a_time_as_one_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision reads only its columns; the rows are copied a slice of a file at a
    time. Slices of one row group (3 rows), or of 2 rows cut from them, give the outputs
    of slices of every row, and together the
    outputs hold every input row once, with the columns of all inputs (a column one
    input lacks is null in its rows; an integer column widened to their common type)
    and the lineage each row had: its file and 1-based row number. The inputs are left
    as they were, byte for byte."""
    from pipeline.jobs import dedupe as job

    first = pl.DataFrame(
        {
            "q": ["a b c", "x", "a  B c", "y", "a b c", "z", "w"],
            "n": pl.Series(range(7), dtype=pl.Int32),
        }
    )
    second = pl.DataFrame(
        {"q": ["x", "v", "A b c", "u"], "n": [10, 11, 12, 13], "extra": ["e"] * 4}
    )
    first.write_parquet(tmp_path / "1.parquet", row_group_size=3)
    second.write_parquet(tmp_path / "2.parquet", row_group_size=3)
    assert pq.read_metadata(tmp_path / "1.parquet").num_row_groups == 3

    def outputs(name: str) -> tuple[pl.DataFrame, pl.DataFrame]:
        out = tmp_path / name
        args = ["dedupe", str(tmp_path / "1.parquet"), str(tmp_path / "2.parquet")]
        result = runner.invoke(app, [*args, "--text", "q", "--out", str(out)])
        assert result.exit_code == 0, result.output
        return pl.read_parquet(out / "kept.parquet"), pl.read_parquet(out / "duplicates.parquet")

    inputs = {p: p.read_bytes() for p in sorted(tmp_path.glob("*.parquet"))}
    whole = outputs("whole")
    monkeypatch.setattr(job, "_WRITE_BYTES", 1)  # a row group at a time
    sliced = outputs("sliced")
    # ...and a row group larger than a piece in pieces of 2 rows: never read whole
    read: list[int] = []
    original = job._rows

    def recording(item, schema, columns, rows=None, **options):  # type: ignore[no-untyped-def]
        if columns is None and rows[1]:  # the copy (not its layout, nor the decision)
            read.append(rows[1])
        return original(item, schema, columns, rows, **options)

    monkeypatch.setattr(job, "_rows", recording)
    monkeypatch.setattr(job, "_WRITE_ROWS", 2)
    pieces = outputs("pieces")
    assert read == [2, 1, 2, 1, 1, 2, 1, 1]  # groups of 3 + 3 + 1 rows, then 3 + 1
    assert {p: p.read_bytes() for p in sorted(tmp_path.glob("*.parquet"))} == inputs
    for a, b, c in zip(whole, sliced, pieces, strict=True):
        assert a.equals(b)
        assert a.equals(c)
    kept, duplicates = sliced
    assert duplicates["q"].to_list() == ["a  B c", "a b c", "x", "A b c"]
    every = pl.concat([kept, duplicates.select(kept.columns)]).sort("_source", "_line")
    assert every.schema == {
        "q": pl.String,
        "n": pl.Int64,
        "_source": pl.String,
        "_line": pl.Int64,
        "_record_sha256": pl.String,
        "extra": pl.String,
    }
    assert every["_line"].to_list() == [*range(1, 8), *range(1, 5)]
    assert every["n"].to_list() == [*range(7), 10, 11, 12, 13]
    assert every["extra"].to_list() == [None] * 7 + ["e"] * 4


def test_a_row_the_copy_loses_fails_the_conservation_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept and duplicate counts the conservation check compares with the rows read
    are the files' own: a copy that loses a row while it counts it is refused, and no
    OUT is left."""
    from pipeline.jobs import dedupe as job

    pl.DataFrame({"q": ["a b c", "x", "a b c", "y"]}).write_parquet(tmp_path / "in.parquet")
    write_slice = job._write_slice

    def losing(kept_out, kept, removed_out, removed):  # type: ignore[no-untyped-def]
        return write_slice(kept_out, None if kept is None else kept[1:], removed_out, removed)

    monkeypatch.setattr(job, "_write_slice", losing)
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["dedupe", str(tmp_path / "in.parquet"), "--text", "q", "--out", str(out)]
    )
    assert isinstance(result.exception, AssertionError)
    assert "lost rows" in str(result.exception)
    assert not out.exists()


def test_every_row_counts_when_none_of_its_columns_is_read(tmp_path: Path) -> None:
    """A file whose only columns are an earlier dedupe's verdicts, or that lacks the key
    column, still has rows: every one of them ends in an output (the decision had read
    none of them, and lost them); integers of two files whose common type pyarrow cannot
    write (int64 and uint64: polars' Int128) are written as decimal(38, 0)."""
    pq.write_table(
        pa.table({"text": ["a b", "a b"], "v": pa.array([1, 2], pa.int64())}),
        tmp_path / "a.parquet",
    )
    pq.write_table(pa.table({"_dedupe_rule": ["x", "y", "z"]}), tmp_path / "b.parquet")
    pq.write_table(
        pa.table({"other": [1, 2], "v": pa.array([3, 4], pa.uint64())}), tmp_path / "c.parquet"
    )
    out = tmp_path / "d"
    files = [str(tmp_path / f"{name}.parquet") for name in "abc"]
    result = runner.invoke(app, ["dedupe", *files, "--key", "text", "--out", str(out)])
    assert result.exit_code == 0, result.output
    kept = pl.read_parquet(out / "kept.parquet")
    duplicates = pl.read_parquet(out / "duplicates.parquet")
    assert kept.height + duplicates.height == 7
    assert duplicates["text"].to_list() == ["a b"]
    assert kept["_line"].to_list() == [1, 1, 2, 3, 1, 2]
    assert kept.schema["v"] == pl.Decimal(38, 0)
    assert kept["v"].to_list()[:1] == [1]
    summary = json.loads((out / "summary.json").read_text())
    assert [i["rows"] for i in summary["inputs"]] == [2, 3, 2]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, "give --kind, or --text/--key"),
        (["--kind", "nope"], 3, "unknown record kind 'nope'"),
        (["--text", "missing"], 3, "no column 'missing'"),
        (["--text", "question", "--survivor", "best"], 2, "dedupe.survivor"),
        (["--text", "question", "--threshold", "1.5"], 2, "dedupe.threshold"),
    ],
)
def test_dedupe_errors(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    path = tmp_path / "f.parquet"
    pl.DataFrame({"question": ["a", "b"]}).write_parquet(path)
    result = runner.invoke(app, ["dedupe", str(path), *args, "--out", str(tmp_path / "d")])
    assert result.exit_code == code, result.output
    assert message in result.output
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("splits", [False, True])
def test_dedupe_of_empty_parquet_writes_empty_tables(tmp_path: Path, splits: bool) -> None:
    """A dataset of no rows is deduped into empty tables, not an internal error; also
    labelled with two splits (whose groups' check then has no shard to run)."""
    path = tmp_path / "empty.parquet"
    pl.DataFrame(schema={"question": pl.String, "task_id": pl.String}).write_parquet(path)
    shutil.copy(path, tmp_path / "other.parquet")
    out = tmp_path / "d"
    given = [str(path)]
    if splits:
        given = ["--split", f"train={path}", "--split", f"eval={tmp_path / 'other.parquet'}"]
    result = runner.invoke(app, ["dedupe", *given, "--text", "question", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert pl.read_parquet(out / "kept.parquet").height == 0
    assert pl.read_parquet(out / "duplicates.parquet").height == 0
    assert pl.read_parquet(out / "split_groups.parquet").height == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"rows": 0, "kept": 0, "duplicates": 0}


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("_split", "has a column named '_split'"),
        ("_row", "has a column named '_row'"),
        # an Elasticsearch export's `_source`: lineage is the pair, one alone is data
        ("_source", "has a column '_source' but no '_line'"),
        ("_line", "has a column '_line' but no '_source'"),
        # both, but not lineage: `_duplicate_of` could not be made (an internal error)
        (
            "_source,_line",
            "columns are not lineage (a string and an integer; they are String and String)",
        ),
        # the placeholder of a file none of whose columns is read: dropped from the output
        ("__rowgate_rows", "has a column named '__rowgate_rows'"),
        # a digest that is no hex text: pointers to the kept row failed (exit 4)
        ("_record_sha256:binary", "its '_record_sha256' column is not lineage"),
    ],
)
def test_dedupe_refuses_a_column_it_would_overwrite(
    tmp_path: Path, column: str, message: str
) -> None:
    """A dataset's own column is never overwritten or dropped: one named like a column
    dedupe writes for itself is refused (exit 3), so kept + duplicates hold every value."""
    path = tmp_path / "f.parquet"
    columns: dict[str, list[object]] = {}
    for name in column.split(","):
        name, _, form = name.partition(":")
        columns[name] = [b"x", b"y"] if form == "binary" else ["x", "y"]
    pl.DataFrame({"question": ["a b c", "a b c"], **columns}).write_parquet(path)
    before = path.read_bytes()
    result = runner.invoke(
        app, ["dedupe", str(path), "--text", "question", "--out", str(tmp_path / "d")]
    )
    assert result.exit_code == 3, result.output
    assert message in result.output
    assert not (tmp_path / "d").exists()
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("where", "args"),
    [
        ("a column the copy alone reads", []),
        ("a key column, read by the key tasks", ["--key", "x"]),
        ("the survivor rule's column, read by the decision", ["--survivor", "max:x"]),
        ("a split group's field, read by its check", ["split groups"]),
    ],
)
def test_dedupe_refuses_a_type_that_would_change_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, args: list[str]
) -> None:
    """Integers in one input and floats in another share a float column: 2**53 + 1 would
    be written as 2**53 and, as a key, compared equal to it (a row removed as an exact
    duplicate of another value). Such a column is refused (exit 3) before any work,
    naming the input and the column; integers a float holds exactly are widened."""
    from pipeline.jobs import dedupe as job

    decide = job._decide
    big, small = tmp_path / "big", tmp_path / "small"
    for folder, ints in ((big, [2**53, 2**53 + 1]), (small, [1, 2])):
        folder.mkdir()
        rows = {"question": ["same words", "same words"], "x": ints, "task_id": ints}
        pl.DataFrame(rows).write_parquet(folder / "a.parquet")
        floats = {"question": ["other words"], "x": [0.5], "task_id": [0.5]}
        pl.DataFrame(floats).write_parquet(folder / "b.parquet")
    for folder in (big, small):
        given = [str(folder)]
        options = [*args]
        if options == ["split groups"]:
            given = [
                "--split",
                f"train={folder / 'a.parquet'}",
                "--split",
                f"eval={folder / 'b.parquet'}",
            ]
            options = []
        out = tmp_path / f"{folder.name}-out"

        def refused(*given: object, big: bool = folder is big) -> object:
            assert not big, "the big integers were not refused before the decision"
            return decide(*given)  # type: ignore[arg-type]

        monkeypatch.setattr(job, "_decide", refused)
        inputs = {p: p.read_bytes() for p in folder.iterdir()}
        result = runner.invoke(
            app, ["dedupe", *given, "--text", "question", *options, "--out", str(out)]
        )
        assert {p: p.read_bytes() for p in folder.iterdir()} == inputs  # never touched
        if folder is big:
            assert result.exit_code == 3, (where, result.output)
            assert f"{folder / 'a.parquet'}: its column " in result.output
            assert "without changing a value" in result.output
            assert not out.exists()
        else:
            assert result.exit_code == 0, (where, result.output)
            rows = pl.concat(
                [pl.read_parquet(out / n) for n in ("kept.parquet", "duplicates.parquet")],
                how="diagonal",
            )
            assert sorted(rows["x"].to_list()) == [0.5, 1.0, 2.0]  # every row, once


def test_fitted_refuses_each_value_a_common_type_would_change() -> None:
    """The check under every read that widens a column to the inputs' common type: a
    value cast back must be itself (null and NaN included); a scalar beside a struct,
    or an integer a float cannot hold, is refused."""
    from pipeline.gate.reader import InputError
    from pipeline.jobs.dataset_keys import fitted

    floats = pl.DataFrame(schema={"x": pl.Float64, "y": pl.String})
    ints = pl.DataFrame({"x": [1, None, -(2**53)]})
    made = fitted(floats, ints, "a.parquet")
    assert made.schema == floats.schema
    assert made["x"].to_list() == [1.0, None, -(2.0**53)]
    assert made["y"].to_list() == [None] * 3
    nan = pl.DataFrame({"x": [float("nan")]}, schema={"x": pl.Float32})
    assert fitted(floats, nan, "n.parquet")["x"].is_nan().all()
    structs = pl.DataFrame(schema={"x": pl.Struct({"k": pl.Float64})})
    for layout, part in (
        (floats, pl.DataFrame({"x": [1, 2**53 + 1]})),
        (structs, pl.DataFrame({"x": [1.5]})),
    ):
        with pytest.raises(InputError, match=r"b\.parquet: its column 'x' \("):
            fitted(layout, part, "b.parquet")


def test_dedupe_with_a_config_that_turns_a_runs_dedupe_off_still_dedupes(tmp_path: Path) -> None:
    """``[dedupe] enabled = false`` keeps a run from deduping (its output to be deduped
    later with the same settings); ``rowgate dedupe -c`` with it dedupes, and its summary
    says so (it said ``"enabled": false`` beside the rows it removed)."""
    path = tmp_path / "f.parquet"
    pl.DataFrame({"question": ["a b c", "a b c", "d e f"]}).write_parquet(path)
    config = tmp_path / "c.toml"
    config.write_text("[dedupe]\nenabled = false\n")
    out = tmp_path / "d"
    result = runner.invoke(
        app, ["dedupe", str(path), "--text", "question", "-c", str(config), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"rows": 3, "kept": 2, "duplicates": 1}
    assert summary["settings"]["enabled"] is True


def test_dedupe_refuses_one_file_under_two_names(tmp_path: Path) -> None:
    """``DIR`` and ``./DIR/f.parquet`` (or a link) were read twice: every row of the file
    was its own duplicate, and with splits its own contamination."""
    folder = tmp_path / "ds"
    folder.mkdir()
    path = folder / "f.parquet"
    pl.DataFrame({"question": ["a b c", "d e f"]}).write_parquet(path)
    (tmp_path / "link.parquet").symlink_to(path)
    for args in (
        [str(folder), f"{tmp_path}/./ds/f.parquet"],
        ["--split", f"train={path}", "--split", f"eval={tmp_path / 'link.parquet'}"],
    ):
        result = runner.invoke(
            app, ["dedupe", *args, "--text", "question", "--out", str(tmp_path / "d")]
        )
        assert result.exit_code == 3, result.output
        assert "is the same file as" in result.output
        assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    "change",
    [lambda m: m.pop("outputs"), lambda m: m["outputs"].append({"path": "x.parquet"})],
    ids=["no outputs", "an entry without disposition"],
)
def test_dedupe_of_a_run_with_a_mangled_manifest_is_a_clear_error(
    split_run: Path, tmp_path: Path, change: Any
) -> None:
    """A run directory whose manifest lacks its list of outputs was an internal error."""
    run_copy = tmp_path / "run"
    shutil.copytree(split_run, run_copy)
    manifest = json.loads((run_copy / "manifest.json").read_text())
    change(manifest)
    (run_copy / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["dedupe", str(run_copy), "--out", str(tmp_path / "d")])
    assert result.exit_code == 3, result.output
    assert "lacks or mangles its list of outputs" in result.output
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--key", "ids"], "ids cannot be compared (ids: List(Int64))"),
        (["--text", "blob"], "blob cannot be compared (blob: Binary)"),
        (["--text", "question", "--survivor", "max:meta.nope"], "dedupe.survivor max:meta.nope"),
    ],
)
def test_dedupe_names_a_column_it_cannot_compare(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """A list key, bytes that are not UTF-8, a survivor struct field that does not exist:
    each failed inside polars, an internal error (exit 4). Now exit 3 naming the column
    and its type, never a value."""
    path = tmp_path / "f.parquet"
    pl.DataFrame(
        {
            "question": ["a b c", "a b c"],
            "ids": [[1], [1]],
            "blob": [b"\xff", b"\xff"],
            "meta": [{"score": 1}, {"score": 2}],
        }
    ).write_parquet(path)
    result = runner.invoke(app, ["dedupe", str(path), *args, "--out", str(tmp_path / "d")])
    assert result.exit_code == 3, result.output
    assert message in result.output
    assert "\\xff" not in result.output
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("staged", [False, True], ids=["exact", "normalised"])
def test_dedupe_finds_the_split_groups_of_a_member_stored_apart(
    tmp_path: Path, staged: bool
) -> None:
    """pw-decide-row's ``meta`` is the ``_meta`` column of a run's output, and its split
    groups name it (``meta.task``, ``meta.group``): the run's dedupe stage reads them by
    the member's name, ``rowgate dedupe`` looked for a ``meta`` column, found none, and
    reported no straddling group where the run found 12."""
    from pipeline.testing.synthetic import export_lines

    (tmp_path / "train.jsonl").write_bytes(
        b"".join(line + b"\n" for line in export_lines("pw-decide-row-1", 12, seed=1))
    )
    (tmp_path / "eval.jsonl").write_bytes(
        b"".join(line + b"\n" for line in export_lines("pw-decide-row-1", 8, seed=2, first_id=100))
    )
    flags = ["--normalised"] if staged else []
    run_out = tmp_path / "r"
    result = runner.invoke(
        app,
        ["run", "--split", f"train={tmp_path / 'train.jsonl'}", "--split",
         f"eval={tmp_path / 'eval.jsonl'}", "--kind", "pw-decide-row-1", "--out", str(run_out),
         "--workers", "1", *flags],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    accepted = pl.read_parquet(run_out / "accepted" / "pw-decide-row-1")
    for split in ("train", "eval"):
        accepted.filter(pl.col("_source").str.ends_with(f"{split}.jsonl")).write_parquet(
            tmp_path / f"{split}.parquet"
        )
    out = tmp_path / "d"
    result = runner.invoke(
        app,
        ["dedupe", "--split", f"train={tmp_path / 'train.parquet'}", "--split",
         f"eval={tmp_path / 'eval.parquet'}", "--kind", "pw-decide-row-1", "--out", str(out),
         "--workers", "1", *flags],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    theirs = pl.read_parquet(run_out / "dedupe" / "split_groups" / "pw-decide-row-1.parquet")
    mine = pl.read_parquet(out / "split_groups.parquet")
    assert theirs.height > 0
    assert set(theirs["field"]) >= {"meta.task", "meta.group"}
    assert mine.sort("field", "value").equals(theirs.sort("field", "value"))
    summary = json.loads((out / "summary.json").read_text())
    manifest = json.loads((run_out / "manifest.json").read_text())
    straddling = manifest["global"]["dedupe"]["pw-decide-row-1"]["straddling_groups"]
    assert summary["dedupe"]["straddling_groups"] == straddling == theirs.height
    # a survivor rule still names the column as the files hold it
    result = runner.invoke(
        app,
        ["dedupe", "--split", f"train={tmp_path / 'train.parquet'}", "--split",
         f"eval={tmp_path / 'eval.parquet'}", "--kind", "pw-decide-row-1", "--out", str(out),
         "--workers", "1", "--survivor", "max:_meta", "--force", *flags],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (
        pl.read_parquet(out / "split_groups.parquet")
        .sort("field", "value")
        .equals(theirs.sort("field", "value"))
    )


def test_force_never_replaces_a_file_a_directory_input_reaches_through_a_link(
    tmp_path: Path,
) -> None:
    """A directory input holding a link to the old OUT's ``kept.parquet``: ``--force``
    replaced that file, the very rows it was reading (only the directory was protected).
    Now every file the directory expands to is protected, as the file itself is."""
    data = tmp_path / "f.parquet"
    pl.DataFrame({"question": ["a b c", "a b c", "d e f"]}).write_parquet(data)
    old = tmp_path / "dd"
    args = ["--text", "question", "--out", str(old)]
    assert runner.invoke(app, ["dedupe", str(data), *args]).exit_code == 0
    kept = old / "kept.parquet"
    before = kept.read_bytes()
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "kept.parquet").symlink_to(kept)
    shutil.copy(data, folder / "more.parquet")
    result = runner.invoke(app, ["dedupe", str(folder), *args, "--force"])
    assert result.exit_code == 2, result.output
    assert "which this command reads" in result.output
    assert kept.read_bytes() == before


def test_a_dataset_changed_while_dedupe_reads_it_fails_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each input is read twice (its keys, then its rows copied): a file rewritten in
    between gave kept and duplicate rows of neither version. A file whose device, inode,
    size or modification time changed by the end is now an input error (exit 3)."""
    import pipeline.jobs.dedupe as dedupe

    path = tmp_path / "f.parquet"
    pl.DataFrame({"question": ["a b c", "a b c", "d e f"]}).write_parquet(path)
    decide = dedupe._decide

    def rewritten(*args: Any, **kwargs: Any) -> Any:
        found = decide(*args, **kwargs)
        pl.DataFrame({"question": ["x y z"] * 5}).write_parquet(path)
        return found

    monkeypatch.setattr(dedupe, "_decide", rewritten)
    args = ["dedupe", str(path), "--text", "question", "--out", str(tmp_path / "d")]
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    assert "changed while dedupe read it" in result.output
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("field", ["messages", "messages.0.role"])
def test_a_split_group_field_that_reads_a_list_is_a_config_error(
    corpus: list[LabelledRow], tmp_path: Path, field: str
) -> None:
    """A split-group field that reads a list names no group: a run and ``rowgate
    dedupe`` both refuse it with exit 2 naming it, and write no OUT (polars failed
    inside them before: an internal error, exit 4)."""
    write_lines(tmp_path / "train.jsonl", corpus[:30])
    write_lines(tmp_path / "eval.jsonl", corpus[30:60])
    config = tmp_path / "c.toml"
    config.write_text(f'[dedupe.split_groups]\n"pairwise-v2" = ["{field}"]\n')
    splits = ["--split", f"train={tmp_path / 'train.jsonl'}"]
    splits += ["--split", f"eval={tmp_path / 'eval.jsonl'}"]
    run = runner.invoke(
        app,
        ["run", *splits, "--config", str(config), "--out", str(tmp_path / "r"), "--workers", "1"],
    )
    assert run.exit_code == 2, run.output
    assert f"{field!r} reads a list (messages)" in run.output
    assert not (tmp_path / "r").exists()
    for name in ("train", "eval"):
        result = runner.invoke(
            app, ["run", str(tmp_path / f"{name}.jsonl"), "--kind", "pairwise-v2", "--out",
                  str(tmp_path / name), "--workers", "1"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    dedupe = runner.invoke(
        app,
        ["dedupe", "--split", f"train={tmp_path / 'train'}", "--split",
         f"eval={tmp_path / 'eval'}", "--config", str(config), "--out", str(tmp_path / "d")],
    )  # fmt: skip
    assert dedupe.exit_code == 2, dedupe.output
    assert f"{field!r} reads a list (messages)" in dedupe.output
    assert not (tmp_path / "d").exists()


def test_a_whole_struct_split_group_field_is_compared_as_its_json_text(tmp_path: Path) -> None:
    """A split-group field naming a whole struct: its value is the struct's JSON text.
    Inputs whose structs differ (one lacks a field, so its rows read it as null) failed
    the cast to text, an internal error (exit 4). A null struct is no value, nor is one
    whose every field is null (a writer's ``{}``): no group. Bytes inside are hex (polars
    cannot write them as JSON: a Rust panic, exit 1 with the value in its message)."""
    pl.DataFrame(
        {
            "question": ["a b c d e", "f g h i j", "u v w x y", "z y x w v"],
            "meta": [{"task": "t1"}, {"task": "t2"}, None, {"task": None}],
        }
    ).write_parquet(tmp_path / "train.parquet")
    layout = pl.Struct({"task": pl.String, "n": pl.Int64, "b": pl.Binary})
    pl.DataFrame(
        {
            "question": ["k l m n o", "p q r s t", "q r s t u", "r s t u v"],
            "meta": [{"task": "t1"}, None, {"task": None}, {"task": "t3", "b": b"\x00\xff"}],
        },
        schema={"question": pl.String, "meta": layout},
    ).write_parquet(tmp_path / "eval.parquet")
    pl.DataFrame(
        {"question": ["v w x y z"], "meta": [{"task": "t3", "b": b"\x00\xff"}]},
        schema={"question": pl.String, "meta": layout},
    ).write_parquet(tmp_path / "dev.parquet")
    config = tmp_path / "c.toml"
    config.write_text('[dedupe.split_groups]\ncolumns = ["meta"]\n')
    out = tmp_path / "d"
    result = runner.invoke(
        app,
        ["dedupe", "--split", f"train={tmp_path / 'train.parquet'}", "--split",
         f"eval={tmp_path / 'eval.parquet'}", "--split", f"dev={tmp_path / 'dev.parquet'}",
         "--text", "question", "--config", str(config), "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    groups = pl.read_parquet(out / "split_groups.parquet")
    assert sorted(groups.rows()) == [
        ("meta", '{"task":"t1","n":null,"b":null}', ["eval", "train"]),
        ("meta", '{"task":"t3","n":null,"b":"00ff"}', ["dev", "eval"]),
    ]


def test_a_struct_holding_only_empty_structs_names_no_group(tmp_path: Path) -> None:
    """``{"inner": {}}`` holds no value, as ``{}`` does: rows of two splits whose split-group
    struct holds only empty structs are no group (they were one, by the text
    ``{"task":null,"inner":{"x":null}}``); a value anywhere below names one."""
    layout = pl.Struct({"task": pl.String, "inner": pl.Struct({"x": pl.Int64})})
    for split, texts, metas in (
        ("train", ["a b c d e", "f g h i j"], [{"inner": {"x": None}}, {"inner": {"x": 3}}]),
        ("eval", ["k l m n o", "p q r s t"], [{"inner": {"x": None}}, {"inner": {"x": 3}}]),
    ):
        frame = pl.DataFrame(
            {"question": texts, "meta": metas}, schema={"question": pl.String, "meta": layout}
        )
        frame.write_parquet(tmp_path / f"{split}.parquet")
    config = tmp_path / "c.toml"
    config.write_text('[dedupe.split_groups]\ncolumns = ["meta"]\n')
    result = runner.invoke(
        app,
        ["dedupe", "--split", f"train={tmp_path / 'train.parquet'}", "--split",
         f"eval={tmp_path / 'eval.parquet'}", "--text", "question", "--config", str(config),
         "--out", str(tmp_path / "d")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    groups = pl.read_parquet(tmp_path / "d" / "split_groups.parquet")
    assert groups.rows() == [("meta", '{"task":null,"inner":{"x":3}}', ["eval", "train"])]


def test_a_config_without_dedupe_keeps_normalised_and_near_off_and_says_so(
    tmp_path: Path,
) -> None:
    """With ``--config``, its ``[dedupe]`` table decides, defaults included, as in a run:
    a config that only sets ``[engine]`` leaves normalised and near off. The console
    said ``0`` for a rule that was not on; it says ``off``."""
    path = tmp_path / "f.parquet"
    pl.DataFrame({"question": ["What is 2+2?", "what is  2+2?", "x"]}).write_parquet(path)
    config = tmp_path / "c.toml"
    config.write_text("[engine]\nworkers = 1\n")
    args = ["dedupe", str(path), "--text", "question"]
    with_config = runner.invoke(app, [*args, "-c", str(config), "--out", str(tmp_path / "c")])
    assert with_config.exit_code == 0, with_config.output
    rules = ("exact", "normalised", "near", "contamination")
    rows = dict(line.split() for line in with_config.output.splitlines() if line.split()[:1]
                and line.split()[0] in rules)  # fmt: skip
    assert rows == {"exact": "0", "normalised": "off", "near": "off", "contamination": "0"}
    turned_on = runner.invoke(
        app, [*args, "-c", str(config), "--normalised", "--out", str(tmp_path / "n")]
    )
    assert turned_on.exit_code == 0, turned_on.output
    assert "normalised     1" in turned_on.output
    assert "near           off" in turned_on.output
    without = runner.invoke(app, [*args, "--out", str(tmp_path / "d")])
    assert "normalised     1" in without.output
    assert "near           0" in without.output


def _sha256s(paths: list[Path]) -> list[str]:
    import hashlib

    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


@pytest.mark.parametrize(
    ("values", "option"),
    [
        ([{"tags": ["x", "y"]}, {"tags": ['x", "y']}], "--key"),  # one text: {["x", "y"]}
        ([{"a": 'x","y', "b": "z"}, {"a": "x", "b": 'y","z'}], "--key"),  # {"x","y","z"}
        ([{"a": "x", "b": "y"}, {"a": "x", "b": "y"}], "--text"),
        ([["x", "y"], ["x", "y"]], "--key"),
    ],
)
def test_a_struct_or_list_key_column_is_refused(
    tmp_path: Path, values: list[Any], option: str
) -> None:
    """A key is read as text, and a struct's or a list's text is not its value: two
    rows that differ read alike, and one was removed as an exact duplicate of the other
    (exit 0). Refused, naming the column and its type, and the input is untouched."""
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1, 2], "st": pa.array(values)}), path)
    before = _sha256s([path])
    result = runner.invoke(app, ["dedupe", str(path), option, "st", "--out", str(tmp_path / "o")])
    assert result.exit_code == 3, result.output
    assert "st cannot be compared" in result.output
    assert "(st: " in result.output
    assert not (tmp_path / "o").exists()
    assert _sha256s([path]) == before


def test_a_type_polars_cannot_hold_is_an_unreadable_input(tmp_path: Path) -> None:
    """A decimal of 40 digits is valid Parquet that polars names but cannot hold: it
    failed as an internal error (exit 4) even as a column dedupe only carries along."""
    import decimal

    path = tmp_path / "in.parquet"
    amounts = pa.array([decimal.Decimal("1.5")] * 3, pa.decimal256(40, 2))
    pq.write_table(pa.table({"t": ["a", "a", "b"], "amount": amounts}), path)
    result = runner.invoke(app, ["dedupe", str(path), "--text", "t", "--out", str(tmp_path / "o")])
    assert result.exit_code == 3, result.output
    assert "not a readable Parquet file" in result.output
    assert not (tmp_path / "o").exists()


def test_a_directory_stands_for_its_parquet_files_in_any_case(tmp_path: Path) -> None:
    """``a.PARQUET`` and ``b.Parquet`` under a directory are read beside ``c.parquet``
    (they were left out without a word: their rows in no output)."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name, texts in (("a.PARQUET", ["x", "y"]), ("b.Parquet", ["x"]), ("c.parquet", ["z"])):
        pq.write_table(pa.table({"t": texts}), folder / name)
    out = tmp_path / "o"
    result = runner.invoke(app, ["dedupe", str(folder), "--text", "t", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert [Path(i["path"]).name for i in summary["inputs"]] == [
        "a.PARQUET",
        "b.Parquet",
        "c.parquet",
    ]
    assert pl.read_parquet(out / "kept.parquet").height == 3
    assert pl.read_parquet(out / "duplicates.parquet").height == 1


def test_a_number_beside_another_inputs_strings_is_refused(tmp_path: Path) -> None:
    """Held as text beside another input's strings, integers compare by their characters
    (``max:s`` kept "9" over 10) and were written as strings, with exit 0."""
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"t": ["same", "other"], "s": pa.array([10, 3], pa.int64())}), a)
    pq.write_table(pa.table({"t": ["same"], "s": pa.array(["9"])}), b)
    result = runner.invoke(
        app,
        [
            "dedupe",
            str(a),
            str(b),
            "--text",
            "t",
            "--survivor",
            "max:s",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert result.exit_code == 3, result.output
    assert "its column 's' (Int64) does not fit" in result.output
    assert not (tmp_path / "o").exists()


def _held_bytes(frame: pl.DataFrame) -> int:
    """The bytes of every buffer ``frame`` holds, shared ones whole (polars' string
    views: a gather of a few rows keeps the whole slice's text buffers)."""
    return int(frame.to_arrow(compat_level=pl.CompatLevel.newest()).get_total_buffer_size())


def test_a_few_rows_of_a_slice_are_held_in_buffers_of_their_own() -> None:
    """The rows ``rowgate dedupe`` holds for a row group are copied out of their slice
    where they are fewer than half of it, with the same values and types (nested,
    categorical and enum columns too); more than half, they are held as they are."""
    from pipeline.jobs.dedupe import _owned

    n = 20_000
    part = pl.DataFrame(
        {
            "q": [f"{'x' * 200}{i}" for i in range(n)],
            "n": range(n),
            "s": [{"a": f"{'y' * 50}{i}", "b": [i, i + 1]} for i in range(n)],
            "c": pl.Series(["p", "q"] * (n // 2), dtype=pl.Categorical),
            "e": pl.Series(["p", "q"] * (n // 2), dtype=pl.Enum(["q", "p"])),
        }
    )
    few = part[list(range(0, n, 100))]
    assert _held_bytes(few) > 2_000_000  # the whole slice's texts, for 200 rows
    owned = _owned(few, part.height)
    assert owned.schema == few.schema
    assert owned.equals(few)
    assert _held_bytes(owned) < _held_bytes(few) / 20
    most = part.head(n // 2 + 1)
    assert _owned(most, part.height) is most
    assert _owned(few.head(0), part.height).height == 0


def test_dedupe_holds_no_slice_for_its_few_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sparse duplicates (1 in 50) over slices of 65,536 rows: each row group's rows
    hold no more than twice their own bytes, so the process does not grow with the
    dataset (before, every slice read was held until its few duplicates were written:
    ~190 bytes a row of the dataset at 3 % duplicates)."""
    import pipeline.jobs.dedupe as job

    n = 150_000
    texts = [f"row {i} " + "w " * 40 for i in range(n)]
    for i in range(50, n, 50):
        texts[i] = texts[i - 1]
    pl.DataFrame({"q": texts, "id": range(n)}).write_parquet(
        tmp_path / "d.parquet", row_group_size=65_536
    )
    before = (tmp_path / "d.parquet").read_bytes()
    held: list[tuple[int, int]] = []
    add = job._RowGroups.add

    def spy(self: Any, frame: pl.DataFrame) -> pl.DataFrame | None:
        if frame.height:
            held.append((_held_bytes(frame), int(frame.estimated_size())))
        return add(self, frame)

    monkeypatch.setattr(job._RowGroups, "add", spy)
    chunks: list[int] = []
    write = job._write_slice

    def written(kept_out: Any, kept: Any, removed_out: Any, removed: Any) -> None:
        chunks.extend(f.n_chunks("all")[0] for f in (kept, removed) if f is not None)
        write(kept_out, kept, removed_out, removed)

    monkeypatch.setattr(job, "_write_slice", written)
    result = runner.invoke(
        app,
        ["dedupe", str(tmp_path / "d.parquet"), "--text", "q", "--no-near",
         "--no-normalised", "--out", str(tmp_path / "out"), "--workers", "1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "d.parquet").read_bytes() == before  # the input is never changed
    # every row lands once: kept or a duplicate, its id never in both or twice
    kept = pl.read_parquet(tmp_path / "out" / "kept.parquet", columns=["id"])["id"]
    removed = pl.read_parquet(tmp_path / "out" / "duplicates.parquet", columns=["id"])["id"]
    assert removed.len() == n // 50 - 1
    assert pl.concat([kept, removed]).sort().to_list() == list(range(n))
    assert len(held) >= 6  # the kept rows and the duplicates of each of three slices
    for buffers, own in held:
        assert buffers <= 2 * own + 65_536
    # a row group is written as one batch, however its rows were gathered and copied
    assert chunks
    assert set(chunks) == {1}
