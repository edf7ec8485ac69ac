"""The console script's entry: SIGTERM handling and defects reported without values."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import pipeline.cli
from pipeline import entry
from pipeline.core.allocator import (
    ALLOCATOR_VARIABLE,
    ARROW_POOL_VARIABLE,
    PARENT_ARROW_POOL,
    RELEASE_AT_ONCE,
)
from pipeline.core.config import ConfigError
from pipeline.output.outdir import atomic_file, claim_output
from tests.conftest import ROOT, python_script

SECRET = "sk-live-PLANTED-77aa01"


@pytest.fixture(autouse=True)
def _sigterm_restored() -> Iterator[None]:
    """entry.main installs a SIGTERM handler; the test process keeps its own."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


class PanicException(BaseException):
    """What a Rust panic in polars or pyarrow raises: a BaseException, not an Exception."""


@pytest.mark.parametrize("error", [ValueError, PanicException])
def test_a_defect_is_reported_by_place_never_by_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: type
) -> None:
    """An exception no command maps (a defect) printed Python's traceback, whose last
    line is the message: polars' and pyarrow's quote the values they failed on. A Rust
    panic (pyo3's ``PanicException``, a BaseException) still did, with exit 1."""

    def crash() -> None:
        raise error(f"could not convert {SECRET!r} to int64")

    monkeypatch.setattr(pipeline.cli, "main", crash)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == entry.EXIT_FAILED
    stderr = capsys.readouterr().err
    assert SECRET not in stderr
    assert "Traceback" not in stderr
    assert f"internal error {error.__module__}.{error.__qualname__}" in stderr
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
from tests.conftest import ROOT, python_script

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
    done = python_script(_SIGTERM_SCRIPT)
    assert done.returncode == 143
    assert done.stdout == "cleaned up\n"
    assert done.stderr == "error: terminated (SIGTERM)\n"


def _turned_into(ending: BaseException | None) -> None:
    """SIGTERM, whose exception a library turns into ``ending`` (Ray's blocking calls
    raise KeyboardInterrupt, which click makes exit 1) or swallows (``None``)."""
    try:
        signal.raise_signal(signal.SIGTERM)
    except entry.Terminated:
        if ending is not None:
            raise ending from None


@pytest.mark.parametrize(
    "ending", [SystemExit(1), KeyboardInterrupt(), SystemError("result with an exception set")]
)
def test_a_command_that_fails_after_sigterm_exits_143(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ending: BaseException
) -> None:
    monkeypatch.setattr(pipeline.cli, "main", lambda: _turned_into(ending))
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == entry.EXIT_TERMINATED
    assert capsys.readouterr().err == "error: terminated (SIGTERM)\n"


@pytest.mark.parametrize("output", ["directory", "file"])
def test_a_sigterm_whose_exception_is_lost_still_stops_the_publishing(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    output: str,
) -> None:
    """Python loses a signal's exception where it lands in a weakref callback (an
    import's; as a library may swallow it): the command went on, published OUT and
    exited 0. What it wrote is removed and not published: exit 143."""
    out = tmp_path / "OUT"
    went_on = []

    def work() -> None:
        if output == "directory":
            with claim_output(out, force=False) as claim, claim.staging() as tmp:
                _lost_sigterm(tmp / "a-file")
                went_on.append(True)
        else:
            with atomic_file(out, force=False) as tmp:
                _lost_sigterm(tmp)
                went_on.append(True)

    monkeypatch.setattr(pipeline.cli, "main", work)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == entry.EXIT_TERMINATED
    assert went_on == [True]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no OUT, nothing beside it
    assert capsys.readouterr().err == "error: terminated (SIGTERM)\n"


def _lost_sigterm(written: Path) -> None:
    written.write_text("written")
    with contextlib.suppress(entry.Terminated):  # lost: no handler sees it
        signal.raise_signal(signal.SIGTERM)


@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [
        (signal.SIGTERM, 143, "error: terminated (SIGTERM)"),
        (signal.SIGINT, 130, "interrupted; no output was written"),
    ],
)
def test_a_signal_while_the_command_line_loads_ends_the_command_with_its_code(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    signum: int,
    code: int,
    line: str,
) -> None:
    """A signal while the command line's modules load (before any command runs) was a
    traceback and exit 1 (SIGTERM) or -2 (Ctrl-C); it is the command's one line and
    exit code. SIGTERM is sent, to the handler the command line installs; Ctrl-C is
    what Python's own handler makes of it, a KeyboardInterrupt: a SIGINT sent to the
    test process once raised nothing there (CI, after ~2,400 other tests; not seen
    again in a run that checked SIGINT's handler and mask after every test)."""
    loading = types.ModuleType("pipeline.cli")

    def arrives(name: str) -> None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt  # as signal.default_int_handler does
        signal.raise_signal(signum)

    loading.__getattr__ = arrives  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "pipeline.cli", loading)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == code
    assert capsys.readouterr().err == line + "\n"


def test_a_command_that_completes_after_sigterm_keeps_its_exit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its output is complete: it says so (exit 0), not that it was terminated."""
    monkeypatch.setattr(pipeline.cli, "main", lambda: _turned_into(None))
    entry.main()
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(pipeline.cli, "main", lambda: _turned_into(SystemExit(0)))
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 0


#: runs ``rowgate run ARGS``: prints the variable (argv[2]) when the module (argv[1])
#: loads, and at exit the parent's Arrow pool and the workers' value of the variable
_ALLOCATOR_SCRIPT = """
import atexit, os, sys, importlib.abc
module, variable = sys.argv[1:3]

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == module:
            print(f"when {module} loads:", os.environ.get(variable), flush=True)
            sys.meta_path.remove(self)
        return None

def workers():  # at exit: the command line closes stdout
    import pyarrow
    from pipeline.engines.local import worker_environment
    print("parent:", pyarrow.default_memory_pool().backend_name, file=sys.stderr)
    print("workers:", repr(worker_environment().get(variable)), file=sys.stderr)

sys.meta_path.insert(0, Watch())
atexit.register(workers)
sys.argv = ["rowgate", "run", *sys.argv[3:]]
from pipeline.entry import main
main()
"""


def _watched_run(
    tmp_path: Path, module: str, variable: str, chosen: str | None
) -> tuple[str, str, str]:
    """A run of the math sample with ``variable`` set to ``chosen`` (None: unset): what
    it held when ``module`` loaded, the parent's Arrow pool and the workers' value."""
    env = {k: v for k, v in os.environ.items() if k != variable}
    if chosen is not None:
        env[variable] = chosen
    math = ROOT / "data" / "math-reasoning-v1.jsonl"
    arguments = [str(math), "--kind", "math-reasoning-v1", "--out", str(tmp_path / "o"), "-q"]
    done = python_script(_ALLOCATOR_SCRIPT, module, variable, *arguments, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    [loaded] = done.stdout.splitlines()
    parent, workers = done.stderr.splitlines()[-2:]
    return loaded, parent, workers


@pytest.mark.parametrize("chosen", [None, "narenas:2"])
def test_the_parents_polars_allocator_hands_memory_back_unless_the_user_chose(
    tmp_path: Path, chosen: str | None
) -> None:
    """polars' jemalloc kept freed pages resident for seconds, so the parent's peak grew
    with the run; the command sets how it releases them before polars loads (it reads
    the variable once). The workers keep jemalloc's defaults; a user's value is kept."""
    loaded, _, workers = _watched_run(tmp_path, "polars", ALLOCATOR_VARIABLE, chosen)
    assert loaded == f"when polars loads: {chosen or RELEASE_AT_ONCE}"
    assert workers == f"workers: {chosen or ''!r}"


@pytest.mark.parametrize("chosen", [None, "jemalloc"])
def test_the_parents_arrow_pool_is_glibcs_unless_the_user_chose(
    tmp_path: Path, chosen: str | None
) -> None:
    """pyarrow's default pool (mimalloc) kept what the parent freed for a second or more,
    so reading one output file after another for the report kept growing; the parent
    allocates Arrow memory from glibc's, whose large blocks it hands back at once. The
    workers keep Arrow's jemalloc pool (:mod:`pipeline.engines.local`); a pool the user
    chose is every process's."""
    loaded, parent, workers = _watched_run(tmp_path, "pyarrow", ARROW_POOL_VARIABLE, chosen)
    assert loaded == f"when pyarrow loads: {chosen or PARENT_ARROW_POOL}"
    assert parent == f"parent: {chosen or PARENT_ARROW_POOL}"
    assert workers == ("workers: None" if chosen else "workers: 'jemalloc'")
