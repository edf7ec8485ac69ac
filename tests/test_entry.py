"""The console script's entry: SIGTERM handling and defects reported without values."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

import pipeline.cli
from pipeline import entry
from pipeline.core.config import ConfigError
from tests.conftest import ROOT

SECRET = "sk-live-PLANTED-77aa01"


@pytest.fixture(autouse=True)
def _sigterm_restored() -> Iterator[None]:
    """entry.main installs a SIGTERM handler; the test process keeps its own."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_defect_is_reported_by_place_never_by_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exception no command maps (a defect) printed Python's traceback, whose last
    line is the message: polars' and pyarrow's quote the values they failed on."""

    def crash() -> None:
        raise ValueError(f"could not convert {SECRET!r} to int64")

    monkeypatch.setattr(pipeline.cli, "main", crash)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == entry.EXIT_FAILED
    stderr = capsys.readouterr().err
    assert SECRET not in stderr
    assert "Traceback" not in stderr
    assert "internal error builtins.ValueError" in stderr
    assert "test_entry.py" in stderr
    assert "in crash" in stderr


def test_a_library_error_outside_a_command_is_reported_with_its_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A RowgateError no command caught (raised outside ``library_errors``) was reported
    as an internal error, exit 4, its message withheld."""

    def refuse() -> None:
        raise ConfigError("limits.max_depth: must be at most 4096")

    monkeypatch.setattr(pipeline.cli, "main", refuse)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == ConfigError.exit_code == 2
    assert capsys.readouterr().err == "error: limits.max_depth: must be at most 4096\n"


_SIGTERM_SCRIPT = """
import signal, pipeline.cli
from pipeline import entry
from tests.conftest import ROOT

def work():
    try:
        signal.raise_signal(signal.SIGTERM)
    finally:
        print("cleaned up", flush=True)

pipeline.cli.main = work
entry.main()
"""


def test_sigterm_runs_every_clean_up_and_exits_143() -> None:
    """SIGTERM killed the command outright, clean-ups and all. The handler raises where
    the main thread is, so every ``finally`` on the way runs. (In a child process: the
    default action of SIGTERM would end the test run.)"""
    done = subprocess.run(
        [sys.executable, "-c", _SIGTERM_SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 143
    assert done.stdout == "cleaned up\n"
    assert done.stderr == "error: terminated (SIGTERM)\n"
