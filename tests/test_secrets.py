"""Record values never leak: reasons, paths, raw bytes of rejected lines, and the outputs.

Unit tests of each rule first; the last test plants secrets in every field type and
encoding, runs the CLI, and greps every output for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.schemas import SchemaRegistry, instance_parts

FIXTURES = Path(__file__).parent / "fixtures"


def _decide_row() -> dict[str, Any]:
    record: dict[str, Any] = json.loads((FIXTURES / "pw_decide_row.json").read_text("utf-8"))
    return record


# -- paths: a map key is one `*` whatever it holds ---------------------------------------


@pytest.mark.parametrize(
    "key", ["a.b.c", "guide.with.dots", "a[0]", "x]y", "", "a..b", "[1].b", "."]
)
def test_a_map_key_is_one_star_whatever_it_holds(key: str) -> None:
    # Issue 15 item 17: fastjsonschema splits its error path on '.', '[' and ']', so a map
    # key "a.b.c" under labels.guides gave "$.labels.guides.*.*.*" (the key's shape).
    entry = SchemaRegistry().get("pw-decide-row-1")
    record = _decide_row()
    record["labels"]["guides"] = {key: "not a boolean"}
    record["labels"]["requests"][0]["scores"] = {key: 7}
    paths = {(r.code, r.path) for r in entry.errors(record)}
    assert ("schema.type", "$.labels.guides.*") in paths
    assert ("schema.maximum", "$.labels.requests[0].scores.*") in paths


def test_instance_parts_reads_the_error_name_against_the_record() -> None:
    record = {"m": {"a": {"b": 1}, "a.b": {"c": [0, {"d.e": 2}]}}}
    assert instance_parts(record, "data.m.a.b.c[1].d.e") == ["m", "a.b", "c", 1, "d.e"]
    assert instance_parts(record, "data.m.a.b") == ["m", "a", "b"]
    assert instance_parts(record, "data") == []
    # A name the record cannot resolve stops at the deepest resolved container.
    assert instance_parts(record, "data.m.zz.y") == ["m"]


# -- plots: every user-supplied string is drawn literally --------------------------------

MATH_LABELS = ["$5-$10 plan", r"$\frac{$", "$x^2$", r"a\$b $", r"$\frac{"]


def _figures(labels: list[str]) -> list[Any]:
    from pipeline.reports import plots

    n = len(labels)
    return [
        plots.reliability_figure(labels[1], [0, 0.5], [0.5, 1], [2, 3], [0.25, 0.7], [0, 1],
                                 [0, 0.4], [0.6, 1]),  # fmt: skip
        plots.risk_coverage_figure(labels[0], [(s, [0.5, 1], [0, 0.5]) for s in labels]),
        plots.forest_figure(labels, [(labels[2], [0.1] * n, [0.05] * n, [0.2] * n)]),
        plots.operating_points_figure(labels, [0.5] * n, [0.1] * n, ([0.4] * n, [0.6] * n),
                                      ([0.05] * n, [0.2] * n)),  # fmt: skip
        plots.bar_figure(labels[3], labels, [1.0] * n, labels[0]),
    ]


def test_plots_draw_dollar_signs_literally(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 15 item 6: a `--by` value "$\frac{" crashed `report calibration` (mathtext
    # parse error); "$5-$10 plan" was silently drawn as the formula "5 − 10 plan".
    import matplotlib.mathtext
    from matplotlib.text import Text

    from pipeline.reports import plots

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a plot label went through the mathtext parser")

    monkeypatch.setattr(matplotlib.mathtext.MathTextParser, "parse", refuse)
    drawn: list[str] = []
    original = Text.draw

    def record(self: Text, renderer: Any) -> None:
        if self.get_visible() and self.get_text():
            drawn.append(self.get_text())
            assert not self.get_usetex()
            assert self._preprocess_math(self.get_text()) == (self.get_text(), False)
        original(self, renderer)

    monkeypatch.setattr(Text, "draw", record)
    for figure in _figures(MATH_LABELS):
        assert plots.figure_png(figure).startswith(b"\x89PNG")
    for label in MATH_LABELS:
        assert label in drawn, (label, drawn)


def test_a_report_sliced_by_values_with_dollar_signs(tmp_path: Path) -> None:
    import polars as pl
    from typer.testing import CliRunner

    from pipeline.cli import app

    data = tmp_path / "eval.parquet"
    pl.DataFrame(
        {
            "prob": [0.1 * (i % 10) + 0.05 for i in range(400)],
            "label": [i % 3 != 0 for i in range(400)],
            "plan": [["$5-$10 plan", r"$\frac{$", "$x^2$", "free"][i % 4] for i in range(400)],
        }
    ).write_parquet(data)
    for command in ("calibration", "selective"):
        out = tmp_path / command
        result = CliRunner().invoke(
            app,
            ["report", command, str(data), "--confidence", "prob", "--correct", "label",
             "--by", "plan", "--out", str(out), "--bootstrap", "0", "-q"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "$5-$10 plan" in (out / "report.html").read_text()
