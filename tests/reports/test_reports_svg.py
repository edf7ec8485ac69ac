"""The run report's hand-drawn SVG charts: well-formed, escaped, deterministic, sensible on
empty and degenerate data, and drawn to scale."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.reports.svg import TAB10, bar_chart, histogram_chart, stacked_bar_chart

NS = "{http://www.w3.org/2000/svg}"
GEOMETRY = frozenset(
    ["x", "y", "x1", "x2", "y1", "y2", "dy", "width", "height", "viewBox", "transform", "d"]
)
NASTY = "a<b&c\"d'e>"
LONG = "semantic.pw-decide-row-1.judged_scores_name_their_judge (quarantined)"


def _parse(chart: str) -> ET.Element:
    root = ET.fromstring(chart)
    assert root.tag == f"{NS}svg"
    width, height = root.attrib["width"], root.attrib["height"]
    assert root.attrib["viewBox"] == f"0 0 {width} {height}"
    assert int(width) > 0
    assert int(height) > 0
    # every coordinate is a finite number (text and titles may say anything: they are data)
    for element in root.iter():
        for name, value in element.attrib.items():
            if name in GEOMETRY:
                assert not re.search(r"nan|inf", value, re.IGNORECASE), (element.tag, value)
    for element in root.iter(f"{NS}text"):
        if element.get("class") == "value":
            assert not re.search(r"nan|inf", element.text or "", re.IGNORECASE)
    return root


def _bars(root: ET.Element) -> list[ET.Element]:
    return [e for e in root.iter(f"{NS}rect") if e.attrib.get("class") == "bar"]


def _texts(root: ET.Element) -> list[str]:
    return [e.text or "" for e in root.iter(f"{NS}text")]


def _width(bar: ET.Element) -> float:
    return float(bar.attrib["width"])


def test_bar_lengths_are_proportional_to_values() -> None:
    values = [40, 10, 0, 25, 5]
    root = _parse(bar_chart("t", ["a", "b", "c", "d", "e"], values, "rows"))
    widths = [_width(b) for b in _bars(root)]
    assert len(widths) == len(values)
    assert widths[2] == 0
    for w, v in zip(widths, values, strict=True):
        assert w == pytest.approx(widths[0] * v / values[0], abs=0.02)
    # the first label on top, every bar from the same axis
    ys = [float(b.attrib["y"]) for b in _bars(root)]
    assert ys == sorted(ys)
    assert len({b.attrib["x"] for b in _bars(root)}) == 1


def test_bars_carry_their_values_and_round_ticks() -> None:
    root = _parse(bar_chart("reasons", ["json.syntax", "line.blank"], [1234, 7], "rows"))
    texts = _texts(root)
    assert "1,234" in texts
    assert "7" in texts
    assert "rows" in texts
    assert {"0", "500", "1,000"} <= set(texts)


def test_stacked_segments_are_contiguous_and_to_scale() -> None:
    series = {"accepted": [30, 0, 5], "quarantined": [2, 0, 5], "rejected": [8, 1, 0]}
    root = _parse(stacked_bar_chart("rows", ["k1", "k2", "k3"], series, "rows"))
    bars = _bars(root)
    assert len(bars) == 9
    unit = _width(bars[0]) / 30
    for category in range(3):
        row = bars[category * 3 : category * 3 + 3]
        x = float(row[0].attrib["x"])
        for bar, name in zip(row, series, strict=True):
            assert float(bar.attrib["x"]) == pytest.approx(x, abs=0.02)
            assert _width(bar) == pytest.approx(unit * series[name][category], abs=0.02)
            x += _width(bar)
    texts = _texts(root)
    assert {"40", "1", "10"} <= set(texts)  # totals at the end of each bar
    assert {"accepted", "quarantined", "rejected"} <= set(texts)  # legend


def test_stacked_colours_are_as_chosen_then_tab10() -> None:
    root = _parse(
        stacked_bar_chart(
            "rows", ["k"], {"accepted": [1], "other": [1]}, "rows", colours={"accepted": TAB10[2]}
        )
    )
    fills = [b.attrib["fill"] for b in _bars(root)]
    assert fills == [TAB10[2], TAB10[0]]
    swatches = [e for e in root.iter(f"{NS}rect") if e.attrib.get("class") == "legend"]
    assert [s.attrib["fill"] for s in swatches] == fills


def test_text_is_escaped() -> None:
    chart = bar_chart(NASTY, [NASTY, "ok"], [1, 2], NASTY)
    assert NASTY not in chart
    root = _parse(chart)
    assert _texts(root).count(NASTY) == 3  # title, label, axis
    assert root.attrib["aria-label"] == NASTY
    stacked = _parse(stacked_bar_chart(NASTY, [NASTY], {NASTY: [1]}, "rows"))
    assert _texts(stacked).count(NASTY) == 3  # title, label, legend
    histogram = _parse(histogram_chart(NASTY, {NASTY: [1.0, 2.0]}, NASTY))
    assert f"{NASTY} (n=2)" in _texts(histogram)


def test_characters_xml_cannot_hold_are_replaced() -> None:
    root = _parse(bar_chart("t\x00", ["a\x1bb", "\ud800"], [1, 2], "rows"))
    assert {"a\ufffdb", "\ufffd"} <= set(_texts(root))


def test_long_labels_keep_both_ends_and_widen_the_chart() -> None:
    short = _parse(bar_chart("t", ["a"], [1], "rows"))
    long = _parse(bar_chart("t", [LONG, LONG * 2], [1, 2], "rows"))
    texts = _texts(long)
    assert LONG in texts
    (cut,) = [t for t in texts if "…" in t]
    assert cut.startswith(LONG[:20])
    assert cut.endswith(LONG[-20:])
    assert int(long.attrib["width"]) > int(short.attrib["width"]) + len(LONG) * 6
    # the label column ends before the bars start
    label = next(e for e in long.iter(f"{NS}text") if e.text == LONG)
    assert float(label.attrib["x"]) < float(_bars(long)[0].attrib["x"])


@pytest.mark.parametrize(
    "chart",
    [
        pytest.param(lambda: bar_chart("zeros", ["a", "b"], [0, 0], "rows"), id="bar-zeros"),
        pytest.param(lambda: bar_chart("none", [], [], "rows"), id="bar-empty"),
        pytest.param(lambda: bar_chart("one", ["a"], [0.5], "share"), id="bar-single-float"),
        pytest.param(
            lambda: stacked_bar_chart("zeros", ["a"], {"x": [0], "y": [0]}, "rows"),
            id="stacked-zeros",
        ),
        pytest.param(lambda: stacked_bar_chart("none", [], {}, "rows"), id="stacked-empty"),
        pytest.param(
            lambda: stacked_bar_chart("no series", ["a", "b"], {}, "rows"), id="stacked-no-series"
        ),
        pytest.param(lambda: histogram_chart("none", {}, "x"), id="histogram-no-groups"),
        pytest.param(
            lambda: histogram_chart("not finite", {"a": [float("nan"), float("inf")]}, "x"),
            id="histogram-not-finite",
        ),
        pytest.param(lambda: histogram_chart("one", {"a": [0.25]}, "x"), id="histogram-one"),
        pytest.param(
            lambda: histogram_chart("huge", {"a": [1e20, 1e20], "b": [-3e15]}, "x"),
            id="histogram-huge",
        ),
        pytest.param(lambda: histogram_chart("huge", {"a": [1e20]}, "x"), id="histogram-huge-one"),
        pytest.param(
            lambda: histogram_chart("tiny", {"a": [1e-9, 2e-9]}, "x"), id="histogram-tiny-range"
        ),
    ],
)
def test_degenerate_data_renders(chart: object) -> None:
    assert callable(chart)
    _parse(chart())


def test_all_zero_bars_have_an_axis() -> None:
    root = _parse(bar_chart("zeros", ["a", "b"], [0, 0], "rows"))
    assert all(_width(b) == 0 for b in _bars(root))
    assert {"0", "1"} <= set(_texts(root))


def test_twenty_categories_each_get_a_band() -> None:
    labels = [f"{LONG}.{i}" for i in range(20)]
    root = _parse(bar_chart("many", labels, list(range(20, 0, -1)), "rows"))
    bars = _bars(root)
    assert len(bars) == 20
    ys = [float(b.attrib["y"]) + float(b.attrib["height"]) for b in bars]
    assert all(b - a >= float(bars[0].attrib["height"]) for a, b in itertools.pairwise(ys))
    assert ys[-1] < int(root.attrib["height"])


def test_output_is_deterministic() -> None:
    def draw() -> tuple[str, str, str]:
        rng = np.random.default_rng(3)
        return (
            bar_chart("t", ["a", "b"], [1 / 3, 2 / 3], "share"),
            stacked_bar_chart("t", ["a", "b"], {"x": [1, 2], "y": [3, 0]}, "rows"),
            histogram_chart("t", {"a": rng.normal(size=500), "b": rng.random(50)}, "score"),
        )

    first = draw()
    assert first == draw()
    # fixed precision: no repr-dependent digits
    assert "0.3333333" not in first[0]
    coordinates = re.findall(r' (?:[xy][12]?|width|height)="([^"]+)"', "".join(first))
    assert len(coordinates) > 100
    assert all(re.fullmatch(r"\d+(\.\d\d)?", c) for c in coordinates)


def test_histogram_counts_every_finite_value() -> None:
    chart = histogram_chart(
        "scores", {"accepted": [0.1, 0.2, 0.9, float("nan")], "duplicate": []}, "_score"
    )
    root = _parse(chart)
    assert len([e for e in root.iter(f"{NS}path") if e.attrib.get("class") == "series"]) == 1
    assert {"accepted (n=3)", "duplicate (n=0)", "_score", "rows"} <= set(_texts(root))


def test_histogram_of_small_integers_has_a_bin_per_value() -> None:
    root = _parse(histogram_chart("sizes", {"clusters": np.array([2, 2, 2, 3, 5])}, "size"))
    (path,) = [e for e in root.iter(f"{NS}path") if e.attrib.get("class") == "series"]
    # one horizontal step per bin: sizes 2..5 is four bins, padded to at least five
    assert path.attrib["d"].count("H") >= 5
    x_ticks = {e.text for e in root.iter(f"{NS}text") if e.attrib.get("text-anchor") == "middle"}
    assert {"2", "3", "4", "5"} <= x_ticks
    assert "2.5" not in x_ticks
    y_ticks = [e.text for e in root.iter(f"{NS}text") if e.attrib.get("text-anchor") == "end"]
    assert y_ticks == ["0", "1", "2", "3"]  # up to the tallest bin


@pytest.mark.parametrize(
    ("values", "message"),
    [([1, -1], "non-negative"), ([1, float("nan")], "finite"), ([1], "1 values for 2 labels")],
)
def test_bad_values_are_refused(values: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bar_chart("t", ["a", "b"], values, "rows")
    with pytest.raises(ValueError, match=message):
        stacked_bar_chart("t", ["a", "b"], {"s": values}, "rows")


@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(st.text(max_size=90), max_size=6),
    data=st.data(),
)
def test_any_labels_make_a_well_formed_chart(labels: list[str], data: st.DataObject) -> None:
    values = data.draw(
        st.lists(
            st.floats(min_value=0, max_value=1e12, allow_subnormal=False),
            min_size=len(labels),
            max_size=len(labels),
        )
    )
    root = _parse(bar_chart("t", labels, values, "rows"))
    assert len(_bars(root)) == len(labels)
    root = _parse(stacked_bar_chart("t", labels, {"a": values, "b": values}, "rows"))
    assert len(_bars(root)) == 2 * len(labels)
