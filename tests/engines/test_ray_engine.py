"""The Ray engine: the local engine's contract (results in task order, progress, one state
per worker, errors), retries of a killed worker, and byte-identical runs.

One private local Ray (``num_cpus=2``) serves the module; each engine built in it joins it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="ray is not installed: pip install 'rowgate[ray]' to test it")

from pipeline.core.config import CampaignConfig, ConfigError, load_campaign
from pipeline.engines import EngineError, Progress, Step
from pipeline.engines import ray as ray_module
from pipeline.engines.ray import RayEngine
from pipeline.jobs import run as run_module
from pipeline.output.verify import verify_run
from pipeline.testing.synthetic import export_lines
from tests.conftest import DATA, ROOT, python_script
from tests.parity import output_digests, planted_campaign

pytestmark = pytest.mark.slow


def _caller_sigterm(signum: int, frame: Any) -> None:
    raise AssertionError("never called")


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[dict[str, Any]]:
    """A local Ray of two CPUs, started once: the engines below join it. Yields the
    SIGTERM handler the caller had installed and the one in place once Ray started."""
    previous = signal.signal(signal.SIGTERM, _caller_sigterm)
    try:
        with RayEngine(2) as engine:
            engine.start()
            yield {"before": _caller_sigterm, "after": signal.getsignal(signal.SIGTERM)}
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_starting_ray_keeps_the_callers_sigterm_handler(local_ray: dict[str, Any]) -> None:
    """ray.init replaces SIGTERM's handler with one that exits at once; the CLI's, which
    unwinds a run and removes its temporary directory, must stay."""
    assert local_ray["after"] is local_ray["before"]


@pytest.mark.parametrize("failures", [1, 2])
def test_a_private_local_ray_gets_a_second_start(
    monkeypatch: pytest.MonkeyPatch, failures: int
) -> None:
    """A local Ray's raylet has 30 s (fixed in Ray) to register, which a loaded machine
    misses now and then: the engine starts it again once, then fails with exit 4."""
    calls: list[str] = []

    def init(**kwargs: Any) -> None:
        calls.append("init")
        if calls.count("init") <= failures:
            raise Exception("The current node timed out during startup.")

    monkeypatch.setattr(ray_module.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_module.ray, "init", init)
    monkeypatch.setattr(ray_module.ray, "shutdown", lambda: calls.append("shutdown"))
    engine = RayEngine(2)
    if failures == 1:
        engine._connect()
        assert calls == ["init", "shutdown", "init"]
    else:
        with pytest.raises(EngineError, match=r"cannot start or reach a local Ray \(2 attempts\)"):
            engine._connect()
        assert calls == ["init", "shutdown", "init", "shutdown"]
    engine._owns_ray = False  # the module's Ray is not this engine's to stop


def test_a_sigterm_inside_ray_init_raises_the_callers_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ray.init puts its own SIGTERM handler, ``sys.exit(SIGTERM)``, in place of the one
    the engine holds: a SIGTERM that arrived then ended the run with exit 15 and no
    message. The start's processes are stopped and the caller's handler acts."""
    calls: list[str] = []

    def init(**kwargs: Any) -> None:
        calls.append("init")
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # Ray's
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs first
        calls.append("not interrupted")

    monkeypatch.setattr(ray_module.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_module.ray, "init", init)
    monkeypatch.setattr(ray_module.ray, "shutdown", lambda: calls.append("shutdown"))
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        engine = RayEngine(2)
        with pytest.raises(_Stopped):
            engine._connect()
        assert calls == ["init", "shutdown"]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_cluster_address_nothing_answers_at_fails_before_ray_tries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray retried an address nothing answered at for minutes, with SIGTERM and Ctrl-C
    held: the driver first opens a connection to it, and fails without asking Ray
    (exit 4); an address something listens at passes."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    monkeypatch.setattr(ray_module.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_module.ray, "init", lambda **kwargs: pytest.fail("Ray was asked"))
    with pytest.raises(EngineError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}"):
        RayEngine(2, f"127.0.0.1:{port}")._connect()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        engine = RayEngine(2, f"ray://127.0.0.1:{listening.getsockname()[1]}")
        assert engine.address is not None
        assert engine._endpoint == ("127.0.0.1", listening.getsockname()[1])
        ray_module._check_reachable(engine.address, engine._endpoint)


def test_an_invalid_ray_address_in_the_environment_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RAY_ADDRESS`` is checked as ``engine.address`` is (exit 2), naming the variable."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:0")
    with pytest.raises(ConfigError, match="RAY_ADDRESS: not a Ray address"):
        RayEngine(2)


def _init_logged(log: str) -> str:
    """A step state that leaves one line in ``log`` per build (per worker process)."""
    with open(log, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    return f"state-of-{os.getpid()}"


def _run_square(state: str, task: int, progress: Progress) -> tuple[int, str]:
    progress(task, 1)
    progress(1, 0)
    return task * task, state


def _builds(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


@pytest.mark.parametrize("ordered_by_cost", [False, True])
def test_results_in_task_order_one_state_per_worker(tmp_path: Path, ordered_by_cost: bool) -> None:
    log = tmp_path / "log"
    step = Step(_init_logged, (str(log),), _run_square)
    calls: list[tuple[int, int]] = []
    cost = (lambda task: task % 5) if ordered_by_cost else None
    with RayEngine(2) as engine:
        results = engine.map(step, iter(range(40)), lambda b, n: calls.append((b, n)), cost)
    assert [square for square, _ in results] == [n * n for n in range(40)]
    # one state per worker process, reused for every later task of the step
    assert len(_builds(log)) == len({state for _, state in results}) <= 2
    # a task's increments come back with it, summed: one call per task, exact totals
    assert len(calls) == 40
    assert sum(b for b, _ in calls) == sum(range(40)) + 40
    assert sum(n for _, n in calls) == 40


def _init_nothing() -> None:
    return None


def _run_failing_at_three(state: None, task: int, progress: Progress) -> int:
    if task == 3:
        raise ValueError("task three is bad")
    return task


def test_a_step_error_propagates_unchanged_and_closes_the_producer() -> None:
    """An exception the step raises is the caller's, as with the local engine (the CLI
    maps e.g. an input error to exit 3); it is not retried; the engine stays usable."""
    closed: list[bool] = []

    def producer() -> Iterator[int]:
        try:
            yield from range(200)
        finally:
            closed.append(True)

    step = Step(_init_nothing, (), _run_failing_at_three)
    with RayEngine(2) as engine:
        with pytest.raises(ValueError, match="task three is bad"):
            engine.map(step, producer())
        assert closed == [True]
        assert engine.map(step, [5, 6]) == [5, 6]


def _run_killing_first(state: None, task: tuple[str, int], progress: Progress) -> int:
    """The first task to run kills its own worker process (SIGKILL), once per marker."""
    marker, number = task
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return number * 10
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def test_a_killed_worker_is_retried_with_complete_results(tmp_path: Path) -> None:
    marker = str(tmp_path / "killed")
    step = Step(_init_nothing, (), _run_killing_first)
    with RayEngine(2, max_retries=2) as engine:
        results = engine.map(step, [(marker, n) for n in range(8)])
    assert os.path.exists(marker)  # a worker was killed mid-map
    assert results == [n * 10 for n in range(8)]


def test_a_killed_worker_without_retries_is_an_engine_error(tmp_path: Path) -> None:
    marker = str(tmp_path / "killed")
    step = Step(_init_nothing, (), _run_killing_first)
    with RayEngine(2, max_retries=0) as engine:
        with pytest.raises(EngineError, match="could not complete after 0 retries"):
            engine.map(step, [(marker, n) for n in range(8)])
        assert engine.map(step, [(marker, 1)]) == [10]  # Ray replaced the worker


class _Stopped(BaseException):
    """What the caller's SIGTERM handler raises (the CLI's ``Terminated``)."""


def _raise_stopped(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Stopped


def _run_sleeping(state: None, task: int, progress: Progress) -> int:
    time.sleep(task)
    return task


def test_a_signal_while_the_driver_waits_on_ray_raises_the_callers_exception() -> None:
    """While the driver blocks in ray.wait, Ray polls for signals from C++: a handler's
    exception raised there came out as a SystemError (4 times in 15 here) and left Ray's
    task table inconsistent, so that cancelling the running tasks then ended the process
    with exit 1 and no clean-up. The engine holds the signal and raises the caller's own
    exception outside Ray; the running tasks are stopped as for Ctrl-C."""
    step = Step(_init_nothing, (), _run_sleeping)
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        with RayEngine(2) as engine:
            timer.start()
            with pytest.raises(_Stopped):
                engine.map(step, [30, 30])
            assert engine._pending == {}
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)


#: a private Ray started and shut down by an engine; then whether SIGTERM is still caught
_SHUTDOWN_SCRIPT = """
import os, signal
from pipeline.engines.ray import RayEngine

signal.signal(signal.SIGTERM, lambda s, f: None)
with RayEngine(1) as engine:
    engine.start()
status = open(f"/proc/{os.getpid()}/status").read().splitlines()
caught = int(next(x for x in status if x.startswith("SigCgt")).split()[1], 16)
print("caught" if caught & 1 << (signal.SIGTERM - 1) else "not caught")
"""


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the signal mask in /proc")
def test_shutting_down_ray_keeps_the_callers_sigterm_handler(tmp_path: Path) -> None:
    """ray.shutdown resets SIGTERM to its default action underneath Python (which still
    reports the handler); a SIGTERM after the engine closed, while the CLI publishes or
    removes its files, would kill it on the spot. Its own process: a private Ray."""
    done = python_script(_SHUTDOWN_SCRIPT, timeout=180)
    assert done.stdout.strip() == "caught", done.stderr[-2000:]


def test_workers_and_retries_are_checked() -> None:
    with pytest.raises(ValueError, match="workers"):
        RayEngine(0)
    with pytest.raises(ValueError, match="max_retries"):
        RayEngine(1, max_retries=-1)


# -- runs ---------------------------------------------------------------------------------


def _on_ray(config: CampaignConfig, **settings: Any) -> CampaignConfig:
    """``config`` run on the Ray engine (``engine.name = "ray"``), with ``engine.*`` settings."""
    return config.override(
        **{"engine.name": "ray", **{f"engine.{k}": v for k, v in settings.items()}}
    )


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> CampaignConfig:
    return planted_campaign(tmp_path_factory.mktemp("generated"))


@pytest.mark.parametrize("campaign", ["bundled", "generated"])
def test_ray_and_local_engines_write_identical_outputs(
    tmp_path: Path, generated: CampaignConfig, campaign: str
) -> None:
    config = load_campaign(DATA / "campaign.toml") if campaign == "bundled" else generated
    local = run_module.run(config, tmp_path / "local")
    # and another partition count for the near rule's candidates on Ray
    ray_run = run_module.run(_on_ray(config, partitions=7), tmp_path / "ray")
    assert ray_run.manifest["config"]["engine"]["name"] == "ray"
    assert len(local.summaries) == len(ray_run.summaries) > 1
    if campaign == "generated":
        rules = local.manifest["global"]["dedupe"]["pairwise-v2"]["by_rule"]
        assert min(rules["exact"], rules["normalised"], rules["near"]) > 0
    assert output_digests(tmp_path / "ray") == output_digests(tmp_path / "local")


def _run_gate_killing_first(state: tuple[Any, str, Any], task: Any, progress: Progress) -> Any:
    """The gate step's run, but the first task to run kills its worker process, once."""
    run, marker, inner = state
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return run(inner, task, progress)
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def _init_gate_killing_first(init: Any, init_args: tuple[Any, ...], run: Any, marker: str) -> Any:
    return run, marker, init(*init_args)


def _killing_gate_step(monkeypatch: pytest.MonkeyPatch, marker: Path) -> None:
    """Make the run's gate phase kill the worker process of its first task, once."""
    gate_step = run_module.gate_step

    def killing(config: CampaignConfig) -> Step[Any, Any, Any]:
        inner = gate_step(config)
        return Step(
            _init_gate_killing_first,
            (inner.init, inner.init_args, inner.run, str(marker)),
            _run_gate_killing_first,
        )

    monkeypatch.setattr(run_module, "gate_step", killing)


@pytest.mark.parametrize("retries", [0, 2])
def test_a_run_whose_worker_is_killed_is_complete_or_fails_with_no_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, generated: CampaignConfig, retries: int
) -> None:
    """A Ray worker killed mid-run: retried, the run's OUT is complete, identical to the
    local engine's and verified; not retried, the run fails (exit 4) and leaves no OUT."""
    reference = tmp_path / "local"
    run_module.run(generated, reference)
    on_ray = _on_ray(generated, max_retries=retries)
    _killing_gate_step(monkeypatch, tmp_path / "killed")
    out = tmp_path / "ray"
    if retries:
        run_module.run(on_ray, out)
        assert (tmp_path / "killed").exists()
        assert output_digests(out) == output_digests(reference)
        report = verify_run(out)
        assert report.ok, report.problems
    else:
        with pytest.raises(EngineError):
            run_module.run(on_ray, out)
        assert (tmp_path / "killed").exists()
        assert not out.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["killed", "local"]


# -- the driver stopped ---------------------------------------------------------------------

#: A bound for "soon" on a loaded machine: Ray's processes exit within seconds.
_PATIENCE = 60.0


def _descendants(root: int) -> set[int]:
    """Every process below ``root`` (a local Ray: GCS, raylet, agents, workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                children.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(
                    int(entry)
                )
        except (OSError, IndexError, ValueError):
            continue
    found, stack = set(), [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.add(child)
            stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _survivors(pids: set[int]) -> list[str]:
    """The command lines of the processes of ``pids`` still alive."""
    found = []
    for pid in sorted(pids):
        if _alive(pid):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as fh:
                command = fh.read().replace(b"\0", b" ")[:120].decode(errors="replace")
                found.append(f"{pid}: {command}")
    return found


def _wait(condition: Any, seconds: float = _PATIENCE) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(condition())


#: Ray's node agents, in their process titles
_RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds Ray's processes in /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_driver_leaves_no_ray_process_and_no_out(tmp_path: Path, signum: int) -> None:
    """SIGTERM mid-run: the CLI's handler (which ray.init had replaced) unwinds the run:
    exit 143, the local Ray and its workers gone, no temporary directory, no OUT. SIGKILL:
    Ray's GCS, raylet and workers die with the driver (Ray binds them to its life on
    Linux), so no task writes on, and nothing is published."""
    lines = b"".join(line + b"\n" for line in export_lines("pairwise-v2", 400, seed=5, size=3))
    big = tmp_path / "big.jsonl"
    big.write_bytes(lines * -(-24_000_000 // len(lines)))
    config = tmp_path / "engine.toml"
    config.write_text("[engine]\nshard_bytes = 1048576\nworkers = 2\n")
    out = tmp_path / "out"
    arguments = [str(big), "--kind", "pairwise-v2", "--config", str(config), "--out", str(out)]
    seen: set[int] = set()
    with open(tmp_path / "stderr", "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "run", "--quiet", "--engine", "ray", *arguments],
            cwd=ROOT,
            stderr=sink,
        )
    try:

        def gating() -> bool:
            seen.update(_descendants(proc.pid))
            return any(tmp_path.glob(".out.rowgate-tmp-*/_staging/*/*.arrow"))

        assert _wait(lambda: gating() or proc.poll() is not None, 600)
        assert proc.poll() is None, "the run ended before the test could stop it"
        seen.update(_descendants(proc.pid))
        assert len(seen) > 2  # a local Ray: its GCS, raylet and workers
        os.kill(proc.pid, signum)
        returncode = proc.wait(timeout=_PATIENCE)
        # SIGKILL leaves Ray's node agents behind a while (they run no task and write
        # nothing of the run); the GCS, the raylet and every worker die with the driver.
        lingering = _RAY_AGENTS if signum == signal.SIGKILL else ()

        def running() -> list[str]:
            return [p for p in _survivors(seen) if not any(a in p for a in lingering)]

        assert _wait(lambda: not running()), (
            returncode,
            running(),
            (tmp_path / "stderr").read_text(errors="replace")[-2000:],
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in seen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not out.exists()
    if signum == signal.SIGTERM:
        assert returncode == 143, (tmp_path / "stderr").read_text()
        assert not list(tmp_path.glob(".out.rowgate-tmp-*"))


def test_rowgate_dedupe_on_ray_writes_what_the_local_engine_writes(
    tmp_path: Path, generated: CampaignConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rowgate dedupe``'s key tasks and near candidates as Ray tasks (the config's
    ``[engine]``), and with a survivor column of text the ranges of its sort: the same
    bytes as on the local engine."""
    from pipeline.core.config import DedupeSettings, EngineSettings
    from pipeline.jobs import dedupe as dedupe_job

    run = run_module.run(generated.override(**{"dedupe.enabled": False}), tmp_path / "run")
    assert run.manifest["counts"]["by_disposition"]["accepted"] > 500
    monkeypatch.setattr(dedupe_job, "KEY_SLICE_BYTES", 1)  # a slice per row group
    inputs = [dedupe_job.DatasetInput(str(tmp_path / "run" / "accepted" / "pairwise-v2"))]
    for survivor in ("first", "max:task_id"):
        settings = DedupeSettings(normalised=True, near=True, survivor=survivor)
        outputs = {}
        for name, engine in (
            ("local", EngineSettings()),
            ("ray", EngineSettings(name="ray", workers=2, partitions=7)),
        ):
            out = tmp_path / survivor.replace(":", "-") / name
            dedupe_job.dedupe_dataset(inputs, out, settings, engine=engine)
            outputs[name] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
        assert outputs["ray"] == outputs["local"]
        rules = json.loads(outputs["local"]["summary.json"])["dedupe"]["by_rule"]
        assert min(rules["exact"], rules["normalised"], rules["near"]) > 0
