"""Shared fixtures: locations of the conformance suites beside the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
CONFORMANCE = SHARED / "conformance"
DATA = ROOT / "data"


@pytest.fixture(scope="session")
def conformance() -> Path:
    """The public conformance suites; their absence is an error, never a skip."""
    if not CONFORMANCE.is_dir():
        pytest.fail(
            f"conformance suites not found at {CONFORMANCE}: check out ../shared beside the repo"
        )
    return CONFORMANCE
