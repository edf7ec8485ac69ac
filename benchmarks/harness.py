"""Benchmark plumbing shared by the scripts in benchmarks/: export generation, timing a
command with the peak resident memory of its whole process tree and of the command's own
process, and table printing.

Peak RSS of the tree is sampled every 20 ms over the process and all its descendants
(rowgate's workers are separate processes), summing their resident set sizes; a sampled
peak can only under-estimate a spike shorter than the interval. The command's own peak
(rowgate's parent, the driver) is the kernel's high-water mark of that one process
(``VmHWM``), read at the same samples: exact, except for growth in its last 20 ms.
(``getrusage`` cannot give it: a child's ``ru_maxrss`` also covers the children it
waited for, i.e. rowgate's workers.)
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from pipeline.testing.synthetic import export_lines, json_dumps_layout

T = TypeVar("T")

PAGE = os.sysconf("SC_PAGE_SIZE")


#: How the export's lines are laid out: orjson's compact form (what the generator
#: writes), or ``json.dumps``' defaults (:func:`~pipeline.testing.synthetic.json_dumps_layout`).
LAYOUTS = ("orjson", "json")


def write_export(
    path: Path,
    megabytes: float,
    *,
    seed: int = 0,
    size: int = 4,
    defect_rate: float = 0.03,
    duplicate_rate: float = 0.03,
    transform: Callable[[bytes, int], bytes] | None = None,
    layout: str = "orjson",
) -> tuple[int, int]:
    """Write a pairwise-v2 export of about ``megabytes`` MB; return (bytes, lines).
    ``transform(line, number)`` may rewrite each line (e.g. plant PII in it); ``layout``
    (:data:`LAYOUTS`) says how the lines are then written."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    target = int(megabytes * 1_000_000)
    written = lines = 0
    with open(path, "wb", buffering=1 << 22) as fh:
        while written < target:
            for line in export_lines(
                "pairwise-v2",
                20_000,
                seed=seed,
                size=size,
                defect_rate=defect_rate,
                duplicate_rate=duplicate_rate,
                first_id=lines,
            ):
                if transform is not None:
                    line = transform(line, lines)
                if layout == "json":
                    line = json_dumps_layout(line)
                fh.write(line + b"\n")
                written += len(line) + 1
                lines += 1
                if written >= target:
                    break
            seed += 1
    return written, lines


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def _high_water_mark(pid: int) -> int:
    """The peak resident set size of one process so far (``VmHWM``), in bytes; 0 once
    it has exited."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_rss(root: int) -> int:
    tree = _children()
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * PAGE
        except OSError:
            pass
        stack.extend(tree.get(pid, ()))
    return total


@dataclass
class Measurement:
    name: str
    seconds: float
    peak_rss: int
    returncode: int
    #: the last line the command wrote to stderr when it failed (its error message)
    error: str = ""
    #: the peak RSS of the command's own process, without its descendants (see above)
    parent_peak_rss: int = 0
    #: user + system CPU seconds of the command and the descendants it waited for (a
    #: figure a loaded machine inflates far less than the wall time; daemons a command
    #: starts and does not wait for, such as a local Ray's, are not in it)
    cpu_seconds: float = 0.0


def measure(name: str, command: Sequence[str], *, env: dict[str, str] | None = None) -> Measurement:
    """Run ``command``; wall time, peak RSS of its process tree and of its own process.
    Its stderr is kept out of the report: a failure is summarised by its last line
    instead."""
    with tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        process = subprocess.Popen(list(command), env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        peak = parent_peak = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak, parent_peak
            while not done.is_set():
                peak = max(peak, _tree_rss(process.pid))
                parent_peak = max(parent_peak, _high_water_mark(process.pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        returncode = process.wait()
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        done.set()
        sampler.join()
        error = ""
        if returncode != 0:
            stderr.seek(0)
            lines = stderr.read().decode("utf-8", "replace").strip().splitlines()
            error = lines[-1] if lines else ""
    return Measurement(name, seconds, peak, returncode, error, parent_peak, cpu)


def process_rss() -> tuple[int, int]:
    """This process's anonymous and file-backed resident bytes (``RssAnon``, ``RssFile``)."""
    found = {}
    with open("/proc/self/status", "rb") as fh:
        for line in fh:
            if line.startswith((b"RssAnon:", b"RssFile:")):
                found[line.split(b":")[0]] = int(line.split()[1]) * 1024
    if len(found) != 2:
        raise RuntimeError("no RssAnon and RssFile in /proc/self/status (Linux only)")
    return found[b"RssAnon"], found[b"RssFile"]


class StepSampler(Generic[T]):
    """``read()`` sampled every 2 ms in a thread while a job runs in this process, and the
    job's steps marked (:meth:`step`, as its progress hook), each with a sample as it
    begins (a step shorter than the period has one too); :meth:`by_step` gives each
    step's samples, for their peaks. Use as a context manager around the job."""

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self.steps: list[tuple[str, float]] = [("start", time.perf_counter())]
        self.samples: list[tuple[float, T]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> StepSampler[T]:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.steps.append(("end", time.perf_counter()))
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.is_set():
            self.samples.append((time.perf_counter(), self._read()))
            time.sleep(0.002)

    def step(self, name: str) -> None:
        now = time.perf_counter()
        self.steps.append((name, now))
        self.samples.append((now, self._read()))

    def by_step(self) -> Iterator[tuple[str, list[T]]]:
        """Each step's name and the samples taken while it ran (a step without one is
        left out)."""
        for (name, start), (_, end) in itertools.pairwise(self.steps):
            inside = [value for t, value in self.samples if start <= t < end]
            if inside:
                yield name, inside


def fastest(fn: Callable[[], object], repeat: int) -> float:
    """The fastest wall time of ``repeat`` calls of ``fn``, in seconds (a shared or
    virtual machine's noise only ever adds time)."""
    return fastest_each({"": fn}, repeat)[""]


def fastest_each(fns: Mapping[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """The fastest wall time of each of ``fns`` over ``repeat`` passes, in seconds; each
    pass calls every function once, in order, so that a drift of the machine during the
    passes reaches all of them alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            started = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def positive(text: str) -> int:
    """An ``argparse`` type: a whole number of at least 1 (counts of rounds, tries, rows)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def chunks(items: Sequence[str], n: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]
