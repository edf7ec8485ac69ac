"""The HTML reports render in headless Chromium (Debian's ``chromium``) with their plots.

Two checks per page, both in a fresh browser profile:

1. ``--dump-dom`` of a copy with a probe script that, on ``load``, counts the images that
   decoded (``complete`` and ``naturalWidth > 0``). The copy keeps the page's
   Content-Security-Policy (only ``script-src`` is added for the probe), so an image that
   needed anything but a ``data:`` URI would fail and be counted. A control image pointing
   at a file proves the probe sees failures.
2. ``--screenshot`` of the page itself: not blank, and plot-coloured pixels present.

Both at 1400 px wide, where the probe also records whether the page is wider than the
window (``scrollWidth > innerWidth``): no table or figure may run past the right margin.

Skipped, with a message saying how to install it, only where Chromium is not installed;
``.ci/run`` installs it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from pipeline.core.config import load_campaign
from pipeline.jobs.run import run
from pipeline.reports.evaluation import evaluate
from pipeline.reports.evaluation_output import write_evaluation
from pipeline.reports.settings import ReportSettings
from pipeline.reports.sources import LoadedTable
from tests.conftest import DATA

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install -y chromium); .ci/run installs it",
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
PROBE = """<img id="control" alt="control" src="file:///nonexistent/control.png">
<script>
window.addEventListener("load", function () {
  var images = Array.from(document.images).filter(function (i) { return i.id !== "control"; });
  var decoded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var control = document.getElementById("control");
  document.body.setAttribute("data-images", decoded.length + "/" + images.length);
  document.body.setAttribute("data-control", String(control.naturalWidth));
  document.body.setAttribute(
    "data-width", document.documentElement.scrollWidth + "/" + window.innerWidth);
});
</script>"""


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


WIDTH = 1400


def _probe(page: Path, tmp_path: Path, width: int) -> str:
    """The DOM of ``page`` after the probe ran, in a window ``width`` px wide."""
    text = page.read_text()
    probed = tmp_path / f"probe-{page.parent.name}.html"
    probed.write_text(
        text.replace(
            "style-src 'unsafe-inline'", "style-src 'unsafe-inline'; script-src 'unsafe-inline'"
        ).replace("</body>", PROBE + "</body>")
    )
    dom = _chromium(
        tmp_path,
        f"--window-size={width},1000",
        "--virtual-time-budget=10000",
        "--dump-dom",
        probed.as_uri(),
    )
    assert "data-images=" in dom.stdout, f"probe did not run: {dom.stderr[-2000:]}"
    return dom.stdout


def _assert_fits(dom: str, width: int) -> None:
    found = re.search(r'data-width="(\d+)/(\d+)"', dom)
    assert found, dom[-500:]
    assert int(found[2]) == width
    assert int(found[1]) <= width, f"the page is {found[1]} px wide in a {width} px window"


def _check_page(page: Path, tmp_path: Path, expected_images: int) -> None:
    dom = _probe(page, tmp_path, WIDTH)
    found = re.search(r'data-images="(\d+)/(\d+)"', dom)
    assert found
    decoded, total = int(found[1]), int(found[2])
    assert total >= expected_images
    assert decoded == total, f"{total - decoded} of {total} plots did not render"
    assert 'data-control="0"' in dom  # the probe does see an image that fails
    _assert_fits(dom, WIDTH)

    shot = tmp_path / f"shot-{page.parent.name}.png"
    _chromium(tmp_path, f"--window-size={WIDTH},4000", f"--screenshot={shot}", page.as_uri())
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
    non_white = (pixels < 245).any(axis=1).mean()
    # plots are the only strongly coloured areas: tables and text are grey
    coloured = (pixels.max(axis=1) - pixels.min(axis=1) > 80).sum()
    assert non_white > 0.05, "screenshot is blank"
    assert len(np.unique(pixels[::7], axis=0)) > 50, "screenshot has almost no colours"
    assert coloured > 5000, "no plot colours in the screenshot"


def test_evaluation_report_renders_with_plots(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    n = 600
    p = rng.beta(3, 2, n)
    table = LoadedTable(
        pl.LazyFrame({"p": p, "ok": rng.random(n) < p, "m": rng.choice(["a", "b"], n)}),
        [],
        "parquet",
    )
    settings = ReportSettings(confidence="p", correct="ok", by=("m",), bootstrap=50).validate()
    write_evaluation(evaluate(table, settings), tmp_path / "evaluation")
    # forest plot, risk-coverage, one reliability diagram per slice
    _check_page(tmp_path / "evaluation" / "report.html", tmp_path, expected_images=5)


def _rows(table: str) -> list[list[str]]:
    body = table[table.index("<tbody>") :]
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row) for row in body.split("<tr")[1:]]


def test_calibration_report_fits_and_lists_slices_in_one_order(tmp_path: Path) -> None:
    """Four ``--by`` slices of unequal size: the page fits 1400 px, the summary, targets and
    plots list ``all`` then the slices in the report's order (not by size), the targets are
    one row per slice, the subtitle is words, and no JSON is dumped on the page."""
    rng = np.random.default_rng(7)
    n = 2000
    p = rng.beta(3, 2, n)
    domain = rng.choice(["zeta", "alpha", "mid", "beta"], n, p=[0.4, 0.3, 0.2, 0.1])
    table = LoadedTable(
        pl.LazyFrame({"p": p, "ok": rng.random(n) < p, "domain": domain}), [], "parquet"
    )
    settings = ReportSettings(confidence="p", correct="ok", by=("domain",), bootstrap=50)
    report = evaluate(table, settings.validate())
    write_evaluation(report, tmp_path / "calibration")
    page_path = tmp_path / "calibration" / "report.html"
    _check_page(page_path, tmp_path, expected_images=7)
    page = page_path.read_text()

    order = [s.label for s in report.slices]
    assert order == ["all", "domain=alpha", "domain=beta", "domain=mid", "domain=zeta"]
    summary, risk, coverage = page.split("<table")[1:4]
    assert [r[0] for r in _rows(summary)] == order
    assert [r[0] for r in _rows(risk)] == order  # one row per slice, not one per target
    assert [r[0] for r in _rows(coverage)] == order
    assert "risk at coverage 0.5" in risk
    assert "coverage at risk 0.01" in coverage
    diagrams = re.findall(r'alt="reliability diagram of ([^"]+)"', page)
    assert diagrams == order

    assert "calibration and risk-coverage of p against ok" in page
    assert "mode scored" not in page
    outside = re.sub(r"<details>.*?</details>", "", page, flags=re.S)
    assert "<pre>" not in outside
    assert '"conventions"' not in outside
    assert '<a href="report.json">' in page


def test_run_report_renders_with_plots(tmp_path: Path) -> None:
    """The bundled campaign's run report: fits 1400 px; its empty dedupe tables (7 cluster
    tables, 7 split-group tables) draw no empty histogram and no ``rows | 0`` table."""
    out = tmp_path / "run"
    run(load_campaign(DATA / "campaign.toml").override(**{"engine.workers": 1}), out)
    _check_page(out / "report.html", tmp_path, expected_images=2)
    page = (out / "report.html").read_text()
    assert '<th>rows</th></tr></thead><tbody><tr><td class="num">0</td>' not in page
    assert page.count('src="data:image/svg+xml;base64,') == 2
    assert page.count("Nothing found in dedupe/clusters/") == 1
    # the reasons table (57 codes, examples with long unbroken field lists) wraps inside
    # its cells: it fitted 1400 px but ran past the margin of a 1000 px window
    _assert_fits(_probe(out / "report.html", tmp_path, 1000), 1000)
