"""Fault injection at every phase boundary (issue 15, DESIGN §3.7 and §3.14).

A run is killed (SIGKILL of the parent or of a worker, SIGTERM of the parent) at the gate,
global and write phases and inside the ``--force`` replace, or its disk fills up at each
phase. After every fault:

* ``OUT`` is complete and ``rowgate verify`` accepts it, or there is no ``OUT``; an ``OUT``
  an earlier run wrote (the faulty run had ``--force``) is intact, byte for byte, and
  still verifies;
* no process of the run is left behind;
* the input files are unchanged.

Faults land at a known moment, not after a guessed delay: this module, run as a script
(``python -m tests.test_fault_injection drive ...``), runs the real ``rowgate run --force``
with hooks added to the :class:`~pipeline.jobs.run.RunObserver` it gives the run, which fire
the fault: at the gate, on the first progress report (workers are gating); at the global
and write phases, when the phase starts; inside the replace, right before each change the
publish makes beside OUT (seen through ``sys.addaudithook``). Every process the run starts
inherits a marker in its environment, which is how leftovers are found after the parent
is gone. A fault that found no worker to kill, or never fired, fails the test.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import multiprocessing
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

#: each test runs the command two or three times (seconds each)
pytestmark = pytest.mark.slow

ROOT: Final = Path(__file__).resolve().parent.parent
PHASES: Final = ("gate", "global", "write")
#: The environment variable every process of a faulty run carries (set by the test).
MARK: Final = "ROWGATE_FAULT_INJECTION"
FAULTS: Final = ("kill-parent", "term-parent", "kill-worker", "fill-disk", "kill-in-replace")
#: The driver's exit code when a worker fault found no worker to kill...
NO_WORKER: Final = 97
#: ...and when the run ended without the fault firing.
NOT_FIRED: Final = 98
#: How long processes of a killed run get to notice and exit (a watchdog may poll).
GRACE_S: Final = 10.0


# -- the driver: runs in its own process, fires one fault at a known moment -----------


def _fill_disk(directory: Path) -> None:
    """Fill the file system holding ``directory`` to the last byte."""
    with open(directory / "filler", "wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 12, 1):
            chunk = b"\0" * size
            try:
                while True:
                    fh.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise


#: Audit events (``sys.addaudithook``) of operations that change a directory's entries;
#: ``ctypes.call_function`` covers a rename made through the C library (``renameat2``).
_MUTATIONS: Final = frozenset(
    {"os.rename", "os.remove", "os.rmdir", "os.mkdir", "shutil.rmtree", "ctypes.call_function"}
)


def _die_before_step(out: Path, nth: int) -> Callable[[], None]:
    """Arrange for this process to SIGKILL itself right before the ``nth`` operation that
    changes an entry of OUT's directory (OUT or a sibling: the steps of a publish, however
    made) once the returned function has armed it."""
    parent = os.path.abspath(out.parent)
    seen = 0
    armed = False

    def names_an_entry(argument: object) -> bool:
        if isinstance(argument, tuple):
            return any(names_an_entry(a) for a in argument)
        if not isinstance(argument, str | bytes | os.PathLike):
            return False
        return os.path.dirname(os.path.abspath(os.fsdecode(argument))) == parent

    def hook(event: str, arguments: tuple[object, ...]) -> None:
        nonlocal seen
        if armed and event in _MUTATIONS and names_an_entry(arguments):
            seen += 1
            if seen == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    def arm() -> None:
        nonlocal armed
        armed = True

    sys.addaudithook(hook)
    return arm


def drive(argv: list[str]) -> None:
    """``python -m pipeline run --config CONFIG --out OUT --force`` (the real command: its
    signal handling, messages and exit codes), with ``--fault`` fired at ``--at`` by hooks
    added to the observer the command gives the run."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--fault", choices=FAULTS, required=True)
    parser.add_argument("--at", choices=PHASES, default="gate")
    parser.add_argument("--nth", type=int, default=1)
    args = parser.parse_args(argv)

    from pipeline.jobs import run as run_job
    from pipeline.jobs.run import RunObserver

    phase = ""
    fired = False
    arm_kill = _die_before_step(args.out, args.nth) if args.fault == "kill-in-replace" else None

    def fire() -> None:
        nonlocal fired
        if fired:
            return
        fired = True
        if args.fault == "kill-parent":
            os.kill(os.getpid(), signal.SIGKILL)
        elif args.fault == "term-parent":
            os.kill(os.getpid(), signal.SIGTERM)
        elif args.fault == "kill-worker":
            workers = multiprocessing.active_children()
            if not workers:
                os._exit(NO_WORKER)
            pid = workers[0].pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        elif args.fault == "fill-disk":
            _fill_disk(args.out.parent)

    library_run = run_job.run

    def run_with_fault(*given: Any, observer: RunObserver | None = None, **options: Any) -> Any:
        front = observer or RunObserver()

        def on_phase(name: str) -> None:
            nonlocal phase
            front.on_phase(name)
            phase = name
            if name == "write" and arm_kill is not None:
                arm_kill()  # the publish follows the write phase
            if name == args.at != "gate":
                fire()

        def on_progress(nbytes: int, nlines: int) -> None:
            front.on_progress(nbytes, nlines)
            if phase == args.at == "gate":
                fire()

        hooks = RunObserver(front.on_start, on_progress, on_phase)
        result = library_run(*given, observer=hooks, **options)
        if not fired:
            os._exit(NOT_FIRED)
        return result

    run_job.run = run_with_fault  # `rowgate run` imports it when it runs
    if arm_kill is not None:
        fired = True  # by the step it counts, if the publish makes that many
    sys.argv = [
        "rowgate", "run", "--config", args.config, "--out", str(args.out), "--force",
        "--workers", str(args.workers), "--quiet",
    ]  # fmt: skip
    runpy.run_module("pipeline", run_name="__main__", alter_sys=True)


# -- the tests -------------------------------------------------------------------------


@dataclass
class Case:
    """One faulty run's world: its campaign (an input and a config) and its output."""

    config: Path
    out: Path
    mark: str
    #: where the driver's stdout goes (stderr beside it, ``.err``)
    log: Path

    def run(self, fault: str, at: str = "gate", workers: int = 2, nth: int = 1) -> Fault:
        env = {**os.environ, "PYTHONPATH": str(ROOT), MARK: self.mark}
        command = [
            sys.executable, "-m", "tests.test_fault_injection", "drive",
            "--config", str(self.config), "--out", str(self.out),
            "--workers", str(workers), "--fault", fault, "--at", at, "--nth", str(nth),
        ]  # fmt: skip
        # Output goes to files, not pipes: a leftover worker would hold a pipe open.
        with open(self.log, "w+b") as stdout, open(self.log.with_suffix(".err"), "w+b") as stderr:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=stderr)
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            stdout.seek(0)
            stderr.seek(0)
            out, err = stdout.read(), stderr.read()
        assert proc.returncode != NO_WORKER, "the run had no worker to kill"
        assert proc.returncode != NOT_FIRED, "the run ended before the fault fired"
        return Fault(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


@dataclass
class Fault:
    returncode: int
    stdout: str
    stderr: str


def _tree(directory: Path) -> dict[str, str]:
    """SHA-256 of every file under ``directory``, by relative path."""
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _cli(*args: str) -> Any:
    """The ``rowgate`` command, in this process."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    return CliRunner().invoke(app, list(args))


def _verifies(out: Path) -> bool:
    """Whether ``rowgate verify OUT`` accepts ``out``."""
    return bool(_cli("verify", str(out)).exit_code == 0)


def _marked(mark: str) -> list[int]:
    """Processes alive (not zombies) whose environment carries ``mark``."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _assert_no_leftover_processes(mark: str) -> None:
    """Every process of the run exits within :data:`GRACE_S`; leftovers are killed (they
    are this test's) and fail it."""
    deadline = time.monotonic() + GRACE_S
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} process(es) of the run outlived it"


def _hidden_siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}"))


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config and ~20 KB of the bundled math export (valid and defective rows), cut
    into several 4 KB shards, gated a line at a time: a gate fault fires on the first
    progress report, and with whole-shard batches a loaded machine delivered none before
    the gate ended (CI: the run ended before the fault fired)."""
    directory = tmp_path_factory.mktemp("inputs")
    lines = (ROOT / "data" / "math-reasoning-v1.jsonl").read_bytes().splitlines(keepends=True)
    (directory / "math.jsonl").write_bytes(b"".join(lines[:96]))
    config = directory / "campaign.toml"
    config.write_text(
        '[[inputs]]\npath = "math.jsonl"\nkind = "math-reasoning-v1"\n'
        "[engine]\nshard_bytes = 4096\nbatch_lines = 1\n"
    )
    return config


@pytest.fixture
def case(campaign: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Case]:
    """A previous OUT made by a complete run with the same ``--out`` (on the small disk
    when the test uses one); after the test, the inputs must be unchanged and no process
    of the faulty run left (also when the test failed)."""
    inputs = sorted(campaign.parent.iterdir())
    before = _tree(campaign.parent)
    disk = request.getfixturevalue("small_disk") if "small_disk" in request.fixturenames else None
    out = (disk or tmp_path) / "out"
    made = _cli("run", "--config", str(campaign), "--out", str(out), "--workers", "1", "-q")
    assert made.exit_code == 0, made.output
    mark = uuid.uuid4().hex
    try:
        yield Case(campaign, out, mark, tmp_path / "driver.out")
    finally:
        for pid in _marked(mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert sorted(campaign.parent.iterdir()) == inputs
    assert _tree(campaign.parent) == before, "an input changed"


def _assert_previous_intact(case: Case, previous: dict[str, str]) -> None:
    assert case.out.is_dir(), "the previous OUT is gone"
    assert _tree(case.out) == previous, "the previous OUT changed"
    assert _verifies(case.out)


def _phases() -> list[Any]:
    return [pytest.param(phase, id=phase) for phase in PHASES]


@pytest.mark.parametrize("at", _phases())
def test_parent_killed_in_each_phase_of_a_one_process_run(case: Case, at: str) -> None:
    """kill -9 of a run that gates in its own process: the previous OUT is intact."""
    previous = _tree(case.out)
    fault = case.run("kill-parent", at, workers=1)
    assert fault.returncode == -signal.SIGKILL
    _assert_previous_intact(case, previous)
    _assert_no_leftover_processes(case.mark)


@pytest.mark.parametrize("at", _phases())
def test_parent_killed_in_each_phase_takes_its_workers_with_it(case: Case, at: str) -> None:
    """kill -9 of the parent while it has workers: the previous OUT is intact and every
    worker exits (they would otherwise keep writing into the temporary directory)."""
    previous = _tree(case.out)
    fault = case.run("kill-parent", at, workers=2)
    assert fault.returncode == -signal.SIGKILL
    _assert_previous_intact(case, previous)
    _assert_no_leftover_processes(case.mark)


@pytest.mark.parametrize("at", _phases())
def test_worker_killed_in_each_phase_fails_the_run_cleanly(case: Case, at: str) -> None:
    """kill -9 of a worker: the run fails with exit 4 and a message (an operational
    failure, never rows rejected), removes its temporary directory, and the previous OUT
    is intact."""
    previous = _tree(case.out)
    fault = case.run("kill-worker", at, workers=2)
    assert fault.returncode == 4, fault.stderr
    assert "Traceback" not in fault.stderr
    _assert_previous_intact(case, previous)
    assert _hidden_siblings(case.out) == []
    _assert_no_leftover_processes(case.mark)


def test_sigterm_cleans_up_like_sigint(case: Case) -> None:
    """SIGTERM during the gate: no temporary directory, no process left; previous OUT
    intact."""
    previous = _tree(case.out)
    fault = case.run("term-parent", "gate", workers=2)
    assert fault.returncode != 0
    _assert_previous_intact(case, previous)
    _assert_no_leftover_processes(case.mark)
    assert _hidden_siblings(case.out) == []


@pytest.mark.parametrize("step", [1, 2, 3])
def test_kill_at_each_step_of_the_force_replace_never_loses_out(case: Case, step: int) -> None:
    """kill -9 right before each change the publish makes beside OUT (today: rename OUT
    aside, rename the new one in, remove the old); then a second run to the same OUT is
    killed as soon as it gates (after any start-up clean-up or recovery). OUT must then
    be complete and verify, the old one or the new one: the old OUT survives until the
    new one is in place."""
    fault = case.run("kill-in-replace", workers=1, nth=step)
    if step == 1:
        assert fault.returncode == -signal.SIGKILL, "the publish changed nothing beside OUT"
    else:  # a publish of fewer steps completed
        assert fault.returncode in (0, -signal.SIGKILL), fault.stderr
    case.run("kill-parent", "gate", workers=1)
    assert case.out.is_dir(), "OUT is lost"
    assert _verifies(case.out)
    _assert_no_leftover_processes(case.mark)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs at ``tmp_path/disk`` (needs root and a kernel that lets us mount)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("disk-full tests need root to mount a small tmpfs")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("disk-full tests: mount -t tmpfs failed here")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize("at", _phases())
def test_disk_full_in_each_phase(small_disk: Path, case: Case, at: str) -> None:
    """The output's file system fills up at each phase: the run fails with exit 4 and a
    message, removes its temporary directory, and the previous OUT is intact."""
    previous = _tree(case.out)
    fault = case.run("fill-disk", at, workers=2)
    assert fault.returncode == 4, fault.stderr
    assert "Traceback" not in fault.stderr
    assert "No space left on device" in fault.stderr
    (small_disk / "filler").unlink()
    _assert_previous_intact(case, previous)
    assert _hidden_siblings(case.out) == []
    _assert_no_leftover_processes(case.mark)


if __name__ == "__main__" and sys.argv[1:2] == ["drive"]:
    drive(sys.argv[2:])
