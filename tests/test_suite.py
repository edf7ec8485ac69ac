"""The suite's own contract: a fresh clone without ``../shared`` skips what needs it, once
per missing thing; CI (``ROWGATE_REQUIRE_SHARED=1``) fails instead; Hypothesis never fails
a test for being slow."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import conftest

pytest_plugins = ["pytester"]

NEEDS_SHARED = """
import pytest

@pytest.mark.needs_shared("specs/a.txt")
@pytest.mark.parametrize("n", range(3))
def test_a(n):
    pass

@pytest.mark.needs_shared("specs/b.txt")
def test_b():
    pass

@pytest.mark.parametrize("n", range(2))
def test_suites(conformance, n):
    assert conformance.name == "conformance"

def test_plain():
    pass
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A suite whose ``../shared`` is an empty temporary folder."""
    monkeypatch.setattr(conftest, "SHARED", pytester.path / "shared")
    monkeypatch.delenv(conftest.REQUIRE_SHARED, raising=False)
    pytester.makepyfile(NEEDS_SHARED)
    return pytester


def test_missing_shared_files_skip_with_one_line_each(inner: pytest.Pytester) -> None:
    result = inner.runpytest("-ra", plugins=[conftest])
    result.assert_outcomes(passed=1, skipped=6)
    skipped = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert len(skipped) == 3, skipped
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED [[]3[]] *: ../shared/specs/a.txt not found beside the checkout",
            "SKIPPED [[]1[]] *: ../shared/specs/b.txt not found beside the checkout",
            "SKIPPED [[]2[]] *: ../shared/conformance not found beside the checkout",
        ]
    )


def test_ci_turns_the_skips_into_failures(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(conftest.REQUIRE_SHARED, "1")
    result = inner.runpytest("-ra", plugins=[conftest])
    result.assert_outcomes(passed=1, errors=6)
    result.stdout.fnmatch_lines(["*../shared/specs/b.txt not found beside the checkout*"])


def test_present_shared_files_run(inner: pytest.Pytester) -> None:
    for what in ("specs/a.txt", "specs/b.txt", "conformance/x"):
        (inner.path / "shared" / what).parent.mkdir(parents=True, exist_ok=True)
        (inner.path / "shared" / what).write_text("")
    inner.runpytest(plugins=[conftest]).assert_outcomes(passed=7)


def test_they_can_be_deselected(inner: pytest.Pytester) -> None:
    inner.runpytest("-m", "not needs_shared", plugins=[conftest]).assert_outcomes(
        passed=1, deselected=6
    )


def test_a_slow_example_is_not_a_failure() -> None:
    """Every example here takes longer than Hypothesis' default 200 ms deadline, as a
    loaded machine can make any test; the suite's profile sets no deadline."""

    @settings(max_examples=2, database=None)
    @given(st.integers())
    def slow(n: int) -> None:
        time.sleep(0.25)

    slow()
    assert settings.default.deadline is None
