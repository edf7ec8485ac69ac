"""The engine registry: ``engine.name`` chooses a registered engine; an unknown name is a
config error listing the known ones; a run builds its engine through the registry."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import ClassVar, TypeVar

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.config import CampaignConfig, ConfigError, EngineSettings, InputSpec
from pipeline.engines import (
    ENGINES,
    Engine,
    LocalEngine,
    Progress,
    Step,
    base,
    get_engine,
    register_engine,
)
from pipeline.jobs.run import run
from tests.conftest import DATA

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

_NAME = "recording-inline"


class _RecordingEngine(Engine):
    """Runs every step in this process and remembers what it was asked to do."""

    built: ClassVar[list[_RecordingEngine]] = []

    def __init__(self, settings: EngineSettings, shards: int | None) -> None:
        self.settings = settings
        self.shards = shards
        self.steps: list[str] = []
        self.closed = False
        _RecordingEngine.built.append(self)

    @classmethod
    def from_settings(cls, settings: EngineSettings, shards: int | None = None) -> _RecordingEngine:
        return cls(settings, shards)

    def close(self) -> None:
        self.closed = True

    def map(
        self,
        step: Step[S, T, R],
        tasks: Iterable[T],
        progress: Progress | None = None,
        cost: Callable[[T], int] | None = None,
    ) -> list[R]:
        self.steps.append(step.run.__qualname__)
        state = step.init(*step.init_args)
        report = progress or (lambda nbytes, nlines: None)
        return [step.run(state, task, report) for task in tasks]


@pytest.fixture
def recording() -> Iterator[type[_RecordingEngine]]:
    register_engine(_NAME)(_RecordingEngine)
    _RecordingEngine.built = []
    try:
        yield _RecordingEngine
    finally:
        ENGINES.pop(_NAME, None)


def _config(engine: str) -> CampaignConfig:
    inputs = (InputSpec(str(DATA / "math-reasoning-v1.jsonl"), "math-reasoning-v1"),)
    return CampaignConfig(inputs=inputs).override(
        **{"engine.name": engine, "engine.workers": 1, "engine.shard_bytes": 4096}
    )


def _parquet_bytes(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


def test_local_is_registered_by_default() -> None:
    assert get_engine("local") is LocalEngine
    assert LocalEngine.name == "local"
    settings = EngineSettings(workers=None)
    assert LocalEngine.from_settings(settings, shards=1).workers == 1
    assert LocalEngine.from_settings(EngineSettings(workers=3), shards=1).workers == 3


def test_an_unknown_engine_is_a_config_error_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=re.escape("engine.name: unknown engine 'spark'")) as e:
        get_engine("spark")
    assert "(known: local, ray)" in str(e.value)
    with pytest.raises(ConfigError, match=re.escape("did you mean 'local'?")):
        get_engine("locl")


def test_the_known_engines_listed_include_registered_ones(
    recording: type[_RecordingEngine],
) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"(known: local, ray, {_NAME})")):
        get_engine("spark")


def test_a_name_is_registered_once(recording: type[_RecordingEngine]) -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register_engine(_NAME)(_RecordingEngine)


def test_an_unknown_engine_fails_the_run_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=re.escape("engine.name: unknown engine 'spark'")):
        run(_config("spark"), out)
    assert list(tmp_path.iterdir()) == []  # neither OUT nor its temporary directory


def test_an_unknown_engine_is_a_usage_error_on_the_command_line(tmp_path: Path) -> None:
    config = tmp_path / "campaign.toml"
    config.write_text(
        f'[[inputs]]\npath = "{DATA / "math-reasoning-v1.jsonl"}"\n[engine]\nname = "spark"\n'
    )
    result = CliRunner().invoke(app, ["run", "--config", str(config), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert "engine.name: unknown engine 'spark' (known: local, ray)" in result.output
    assert not (tmp_path / "o").exists()


def test_a_registered_engine_is_chosen_by_name(
    recording: type[_RecordingEngine], tmp_path: Path
) -> None:
    """The run builds the engine ``engine.name`` names, from the config's settings, runs
    the gate, the global phase's partitioned checks, its merge by shard and the writer on
    it, closes it, and writes the same files as on the local engine."""
    result = run(_config(_NAME), tmp_path / "recorded")
    [engine] = recording.built
    assert engine.settings.name == _NAME
    assert engine.shards is not None
    assert engine.shards > 1
    # the gate; the grouping checks of the replay rule (the later rows of a key another
    # row shares, each telling whether its body is its key's first row's) and of exact
    # dedupe (each a shuffle, then a task per partition; math rows have no contradiction
    # rule); the decisions merged a shard at a time; the writer
    checks = ["_shuffle_shard", "_partition_rows"] * 2
    assert engine.steps == ["_gate_shard", *checks, "_decide_shard", "_write_shard"]
    assert engine.closed
    run(_config("local"), tmp_path / "local")
    files = _parquet_bytes(tmp_path / "recorded")
    assert files
    assert files == _parquet_bytes(tmp_path / "local")
    assert result.manifest["config"]["engine"]["name"] == _NAME


def test_a_lazy_engine_is_imported_when_named_and_its_missing_library_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine whose client library rowgate does not require (Ray) is imported only when
    a run names it; without the library, the error names the extra to install."""
    monkeypatch.setitem(base.LAZY_ENGINES, "elsewhere", ("pipeline.engines.no_such_engine", "x"))
    with pytest.raises(
        ConfigError, match=r"engine\.name: the elsewhere engine needs .*rowgate\[x\]"
    ):
        get_engine("elsewhere")
    with pytest.raises(ConfigError, match=r"known: .*elsewhere.*local.*ray"):
        get_engine("nowhere")
