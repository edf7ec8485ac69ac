"""The runnable examples in the report modules' docstrings stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = (
    "pipeline.reports.bootstrap",
    "pipeline.reports.calibration",
    "pipeline.reports.selective",
    "pipeline.reports.evaluation",
    "pipeline.reports.evaluation_output",
    "pipeline.reports.plots",
    "pipeline.reports.svg",
    "pipeline.reports.html",
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
