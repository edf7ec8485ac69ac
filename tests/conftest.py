"""Shared settings, markers and fixtures of the suite.

* ``../shared`` beside the checkout holds the public conformance suites, the source specs
  and upstream reference files; a fresh clone does not have it. A test that reads from it
  says what it needs, ``@pytest.mark.needs_shared("reference/ari/…")`` or the
  :func:`conformance` fixture, and is skipped without it, with one reason per missing
  thing (``pytest -ra`` prints each once). CI sets ``ROWGATE_REQUIRE_SHARED=1``, which
  turns those skips into failures.
* Hypothesis runs under the ``ci`` profile: no wall-clock deadline and no "too slow"
  health check, so a busy machine never fails a test (``HYPOTHESIS_PROFILE`` picks
  another registered profile).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The global stages register themselves into GLOBAL_STAGES when first imported: imported
# while a test had patched that list, they went into the patched copy and were gone for
# every later test in the process (runs without cross rules or dedupe).
import pipeline.decide.stages  # noqa: F401
from pipeline.core import signals

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
DATA = ROOT / "data"
REQUIRE_SHARED = "ROWGATE_REQUIRE_SHARED"


def python_script(
    script: str, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``script`` run by this Python in a child process from the checkout (a test whose
    subject is the process: its signals, its exit, what it loads), output captured."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(autouse=True)
def _no_sigterm_carried_over() -> Iterator[None]:
    """A test that sends this process SIGTERM through the command line's handler leaves
    it recorded (:mod:`pipeline.core.signals`): every later command would refuse to
    publish. A process that really got one is ending; a test process goes on."""
    yield
    signals.clear()


settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_shared(what): reads ../shared/<what> beside the checkout; skipped without it "
        f"({REQUIRE_SHARED}=1 makes that a failure)",
    )


def require_shared(what: str) -> Path:
    """``../shared/<what>``; a skip naming it when it is missing, or a failure in CI."""
    path = SHARED / what
    if not path.exists():
        reason = f"../shared/{what} not found beside the checkout"
        if os.environ.get(REQUIRE_SHARED) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SHARED}=1)", pytrace=False)
        pytest.skip(reason)
    return path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test taking the conformance fixture is marked like any other (skipped from one
    place, so its reason is grouped; deselected by ``-m "not needs_shared"``)."""
    for item in items:
        if "conformance" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.needs_shared("conformance"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("needs_shared"):
        require_shared(*marker.args)


@pytest.fixture(scope="session")
def conformance() -> Path:
    """The public conformance suites (JSONTestSuite, JSON-Schema-Test-Suite, RFC 8785)."""
    return require_shared("conformance")
