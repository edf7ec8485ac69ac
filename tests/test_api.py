"""The public API (``pipeline.__all__``): documented, examples that run, runs read back.

That ``import pipeline`` loads none of it: ``tests/cli/test_cli.py``.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import polars as pl
import pytest

import pipeline
from pipeline.core.config import ConfigError
from pipeline.gate.reader import InputError
from pipeline.reports.settings import ReportSettings
from tests.conftest import DATA, ROOT


def test_public_names_resolve_and_shadow_no_module() -> None:
    modules = {m.name for m in pkgutil.iter_modules(pipeline.__path__)}
    assert not set(pipeline.__all__) & modules
    for name in pipeline.__all__:
        assert getattr(pipeline, name) is getattr(importlib.import_module("pipeline._api"), name)
    assert set(pipeline.__all__) <= set(dir(pipeline))
    with pytest.raises(AttributeError, match="no attribute 'gate_line'"):
        _ = pipeline.gate_line


@pytest.mark.parametrize("name", pipeline.__all__)
def test_public_names_have_numpydoc_examples(name: str) -> None:
    doc = getattr(pipeline, name).__doc__ or ""
    assert "Examples\n    --------\n    >>> " in doc


def test_docstring_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the examples name data/campaign.toml as a user's shell would
    result = doctest.testmod(
        importlib.import_module("pipeline._api"), optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0
    assert result.failed == 0


def test_figures_display_as_png_in_ipython() -> None:
    """Jupyter shows a figure through IPython's display formatter: without pyplot's inline
    backend a bare matplotlib Figure has only a text form (``<Figure size 700x184 with 1
    Axes>``); a ReportFigure always has a PNG."""
    from IPython.core.formatters import DisplayFormatter

    chart = pipeline.bar_figure("reasons", ["json.syntax", "$5-$10 plan"], [3, 1], "rows")
    data, _ = DisplayFormatter().format(chart)
    assert data["image/png"].startswith(b"\x89PNG\r\n\x1a\n")
    assert data["image/png"] == chart.png()


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("api") / "out"
    config = pipeline.load_campaign(DATA / "campaign.toml").override(**{"engine.workers": 1})
    result = pipeline.run_campaign(config, out)
    assert result.out == out
    return out


@pytest.mark.slow
def test_a_run_read_back_through_the_api(sample_run: Path) -> None:
    manifest = pipeline.read_manifest(sample_run)
    counts = manifest["counts"]["by_disposition"]
    rejected = pipeline.scan_outputs(sample_run, "rejected").select(pl.len()).collect().item()
    assert rejected == counts["rejected"] > 0
    accepted = sum(
        pipeline.scan_outputs(sample_run, "accepted", kind).select(pl.len()).collect().item()
        for kind in {o["kind"] for o in manifest["outputs"] if o["disposition"] == "accepted"}
    )
    assert accepted == counts["accepted"]
    assert pipeline.verify_run(sample_run).ok
    turns = pipeline.evaluate(sample_run, preset="pw-decide-row", calibration=False, bootstrap=0)
    assert turns.slices[0].summary["n"] > 0
    assert pipeline.operating_points_figure(turns).png().startswith(b"\x89PNG")


@pytest.mark.slow
def test_scan_outputs_names_what_is_wrong(sample_run: Path) -> None:
    with pytest.raises(ValueError, match="'duplicates' is not one of accepted, rejected"):
        pipeline.scan_outputs(sample_run, "duplicates")
    with pytest.raises(ValueError, match=r"accepted rows of several kinds .*pairwise-v2"):
        pipeline.scan_outputs(sample_run, "accepted")
    with pytest.raises(InputError, match="the run wrote no quarantined agent-trace-v1 rows"):
        pipeline.scan_outputs(sample_run, "quarantined", "agent-trace-v1")


def test_evaluate_takes_settings_or_options_not_both() -> None:
    rows = pl.DataFrame({"p": [0.2, 0.8], "y": [0, 1]})
    settings = ReportSettings(confidence="p", correct="y", bootstrap=0)
    assert pipeline.evaluate(rows, settings).slices[0].summary["n"] == 2
    with pytest.raises(TypeError, match="not both"):
        pipeline.evaluate(rows, settings, bins=3)
    with pytest.raises(ConfigError, match="correct"):
        pipeline.evaluate(rows, confidence="p")
