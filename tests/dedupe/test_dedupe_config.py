"""The ``[dedupe]`` table of the campaign config and split labels on inputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.core.config import ConfigError, InputSpec, load_campaign


def _load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    return load_campaign(path)


def test_dedupe_table_and_splits_load(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        """
[[inputs]]
path = "a.jsonl"
split = "train"

[[inputs]]
path = "b.jsonl"
split = "eval"

[dedupe]
threshold = 0.85
shingle_size = 4
bands = 16
fold_case = false
survivor = "max:ratings.style"
survivor_by_kind = { "math-reasoning-v1" = "min:reasoning_score" }
protected_splits = ["eval"]
split_groups = { "pw-decide-row-1" = ["meta.group"] }
""",
    )
    assert [s.split for s in config.inputs] == ["train", "eval"]
    d = config.dedupe
    assert (d.threshold, d.shingle_size, d.bands, d.fold_case) == (0.85, 4, 16, False)
    assert d.survivor_rule("pairwise-v2") == "max:ratings.style"
    assert d.survivor_rule("math-reasoning-v1") == "min:reasoning_score"
    assert d.protected_splits == ("eval",)
    assert d.split_groups == {"pw-decide-row-1": ("meta.group",)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[dedupe]\nthreshold = 0", "dedupe.threshold: must be in (0, 1]"),
        ("[dedupe]\nthreshhold = 0.8", "dedupe.threshhold: unknown key"),
        ("[dedupe]\nbands = 300", "dedupe.bands: must be between 1 and permutations"),
        ("[dedupe]\nshingle_size = 0", "dedupe.shingle_size"),
        ("[dedupe]\nsurvivor = 'best'", "dedupe.survivor: 'best' is not"),
        ("[dedupe]\nsurvivor_by_kind = { k = 'max:' }", "dedupe.survivor_by_kind.k"),
        ("[dedupe]\nprotected_splits = ['eval', 'eval']", "listed twice"),
        # where a row was staged depends on the shards: never a survivor or group field
        ("[dedupe]\nsurvivor = 'min:_shard_line'", "dedupe.survivor: '_shard_line' is where"),
        (
            "[dedupe]\nsurvivor_by_kind = { k = 'max:_shard' }",
            "dedupe.survivor_by_kind.k: '_shard' is where",
        ),
        (
            "[dedupe.split_groups]\nk = ['task_id', '_shard_line']",
            "dedupe.split_groups.k: '_shard_line' is where",
        ),
        (
            "[[inputs]]\npath = 'a'\nsplit = 'train'\n[dedupe]\nprotected_splits = ['eval']",
            "no input is labelled with split 'eval'",
        ),
        ("[[inputs]]\npath = 'a'\nsplit = ' '", "inputs[0].split: must not be empty"),
    ],
)
def test_dedupe_config_errors_name_their_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _load(tmp_path, text)


def test_split_options() -> None:
    assert InputSpec.labelled("eval=data/b.jsonl", "pairwise-v2") == InputSpec(
        "data/b.jsonl", "pairwise-v2", "eval"
    )
    assert InputSpec.labelled("train=x=y.jsonl").path == "x=y.jsonl"
    with pytest.raises(ConfigError, match="expected SPLIT=PATH"):
        InputSpec.labelled("b.jsonl")


@pytest.mark.parametrize("table", ["survivor_by_kind", "split_groups"])
@pytest.mark.parametrize("command", ["run", "dedupe"])
def test_a_kind_table_naming_no_kind_is_refused(table: str, command: str, tmp_path: Path) -> None:
    """A kind misspelt in ``survivor_by_kind`` or ``split_groups`` is a config error
    (exit 2) naming the key and the kind meant, in a run and in ``rowgate dedupe``: its
    rule applied to no row, and the first row of each group was kept silently."""
    import polars as pl
    from typer.testing import CliRunner

    from pipeline.cli import app
    from tests.conftest import DATA

    value = "'max:reasoning_score'" if table == "survivor_by_kind" else "['task_id']"
    config = tmp_path / "campaign.toml"
    config.write_text(
        f"[[inputs]]\npath = '{DATA / 'math-reasoning-v1.jsonl'}'\n\n"
        f'[dedupe]\n{table} = {{ "math-reasoning" = {value} }}\n'
    )
    if command == "run":
        argv = ["run", "--config", str(config), "--out", str(tmp_path / "out")]
    else:
        pl.DataFrame({"text": ["a", "a"]}).write_parquet(tmp_path / "d.parquet")
        argv = ["dedupe", str(tmp_path / "d.parquet"), "--text", "text", "-c", str(config)]
        argv += ["--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    err = result.output
    assert f"dedupe.{table}.math-reasoning: unknown record kind" in err
    assert "did you mean 'math-reasoning-v1'?" in err
    assert not (tmp_path / "out").exists()
