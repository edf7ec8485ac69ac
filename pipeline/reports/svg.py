"""The run report's charts as small standalone SVG documents, drawn by hand so that
``rowgate run`` never loads matplotlib: horizontal bars, stacked horizontal bars and
overlaid step histograms.

Each chart is a pure function of its inputs. Ticks are round numbers and every number is
printed with fixed precision, so the same inputs give the same bytes on every platform.
All text is XML-escaped. Category labels are set in a monospace font, whose advance width
is known, so the label column is sized to fit them.
"""

from __future__ import annotations

import html
import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "TAB10",
    "Binned",
    "bar_chart",
    "binned_histogram_chart",
    "histogram_chart",
    "histogram_edges",
    "stacked_bar_chart",
]

#: matplotlib's default ``tab10`` palette: blue, orange, green, red, purple, brown, pink,
#: grey, olive, cyan
TAB10: Final = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)

_INK: Final = "#1f2328"
_MUTED: Final = "#57606a"
_GRID: Final = "#d8dee4"
_SANS: Final = "DejaVu Sans, Helvetica, Arial, sans-serif"
_MONO: Final = "DejaVu Sans Mono, Menlo, Consolas, monospace"
#: advance width of a glyph as a share of the font size: exact for monospace fonts
#: (0.60–0.61), a generous bound for digits and lower case in the sans-serif fonts
_MONO_ADVANCE: Final = 0.62
_SANS_ADVANCE: Final = 0.62
_LABEL_SIZE: Final = 11
_TEXT_SIZE: Final = 11
_TITLE_SIZE: Final = 14
#: longer labels keep their start and end around an ellipsis (the tables show them whole)
_MAX_LABEL: Final = 72

_PAD: Final = 12.0
_GAP: Final = 6.0
_TITLE_H: Final = 36.0
_BAND: Final = 24.0
_BAR: Final = 16.0
_PLOT_W: Final = 420.0
_AXIS_H: Final = 42.0
_LEGEND_ROW: Final = 18.0
_HIST_W: Final = 480.0
_HIST_H: Final = 200.0
_TICKS: Final = 5

# characters XML 1.0 does not allow even escaped, and lone surrogates (not encodable)
_NOT_XML: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def bar_chart(
    title: str,
    labels: Sequence[str],
    values: Sequence[int | float],
    unit: str,
    *,
    colour: str = TAB10[0],
) -> str:
    """Horizontal bars, the first label on top, each bar labelled with its value.

    Parameters
    ----------
    title
        Drawn above the chart.
    labels, values
        One bar per label; values are finite and non-negative.
    unit
        The axis label (what the values count).
    colour
        The bars' fill.

    Examples
    --------
    >>> chart = bar_chart("reasons", ["json.syntax", "line.blank"], [3, 1], "rows")
    >>> chart.startswith("<svg "), chart.count('class="bar"')
    (True, 2)
    """
    numbers = _checked(values, len(labels), "values")
    return _horizontal(title, labels, {"": numbers}, unit, {"": colour}, legend=False)


def stacked_bar_chart(
    title: str,
    categories: Sequence[str],
    series: Mapping[str, Sequence[int | float]],
    unit: str,
    *,
    colours: Mapping[str, str] | None = None,
) -> str:
    """Horizontal stacked bars: one bar per category (the first on top), one colour per
    series in the order given, the total at the end of each bar and a legend below.

    Parameters
    ----------
    title
        Drawn above the chart.
    categories
        One bar per category.
    series
        Name → one finite, non-negative value per category.
    unit
        The axis label (what the values count).
    colours
        Fill per series name; series not named take ``TAB10`` colours in order.

    Examples
    --------
    >>> chart = stacked_bar_chart("rows", ["a"], {"accepted": [3], "rejected": [1]}, "rows")
    >>> chart.count('class="bar"'), chart.count('class="legend"')
    (2, 2)
    """
    numbers = {name: _checked(v, len(categories), name) for name, v in series.items()}
    return _horizontal(
        title, categories, numbers, unit, _colours(list(series), colours), legend=True
    )


def histogram_chart(
    title: str,
    groups: Mapping[str, Sequence[float] | npt.NDArray[Any]],
    unit: str,
    *,
    bins: int = 30,
    colours: Mapping[str, str] | None = None,
) -> str:
    """Overlaid step histograms, one per group, over a shared range; values that are not
    finite are left out. Integer data spanning fewer than ``bins`` values gets one bin per
    integer (and at least five bins).

    Parameters
    ----------
    title
        Drawn above the chart.
    groups
        Name → values; one outline per group, its size in the legend.
    unit
        The x axis label (what the values measure); the y axis counts rows.
    bins
        Equal-width bins over the range of all groups' values.
    colours
        Outline per group name; groups not named take ``TAB10`` colours in order.

    Examples
    --------
    >>> chart = histogram_chart("sizes", {"clusters": [2, 2, 3, 5]}, "size")
    >>> chart.count('class="series"'), "clusters (n=4)" in chart
    (1, True)
    """
    if bins < 1:
        raise ValueError(f"bins must be at least 1, not {bins}")
    data: dict[str, npt.NDArray[np.float64]] = {}
    for name, values in groups.items():
        array = np.asarray(values, dtype=np.float64).ravel()
        data[name] = array[np.isfinite(array)]
    everything = np.concatenate(list(data.values())) if data else np.array([])
    integer = bool(everything.size) and bool(np.all(everything == np.round(everything)))
    low, high = (float(everything.min()), float(everything.max())) if everything.size else (0, 0)
    edges = histogram_edges(low, high, bins, integer=integer, empty=not everything.size)
    counts = {
        name: np.histogram(values, bins=edges)[0] for name, values in data.items() if values.size
    }
    sizes = {name: int(values.size) for name, values in data.items()}
    return binned_histogram_chart(
        title, Binned(edges, counts, sizes, integer), unit, colours=colours
    )


@dataclass(frozen=True)
class Binned:
    """A histogram's groups counted over shared ``edges`` (:func:`histogram_edges`), for
    :func:`binned_histogram_chart`: ``counts`` per group with values, ``sizes`` (its
    finite values) per group, every group in legend order; ``integer``: every value is
    an integer. Counted a piece of the data at a time, the counts add up to those of the
    whole (a value's bin depends on it alone)."""

    edges: npt.NDArray[np.float64]
    counts: Mapping[str, npt.NDArray[np.int64]]
    sizes: Mapping[str, int]
    integer: bool


def binned_histogram_chart(
    title: str, binned: Binned, unit: str, *, colours: Mapping[str, str] | None = None
) -> str:
    """:func:`histogram_chart` of values already counted into bins."""
    edges, counts, integer = binned.edges, binned.counts, binned.integer
    palette = _colours(list(binned.sizes), colours)
    top = float(max((int(c.max()) for c in counts.values()), default=0))
    y_max, y_ticks = _ticks(0.0, top, integer=True, from_zero=True)
    low, high = float(edges[0]), float(edges[-1])
    _, x_ticks = _ticks(low, high, integer=integer, from_zero=False)

    y_label_w = max(_width(text, _TEXT_SIZE, _SANS_ADVANCE) for _, text in y_ticks)
    area = _HistogramArea(_PAD + _TEXT_SIZE + _GAP + y_label_w + _GAP, _TITLE_H, low, high, y_max)
    legend = [(f"{name} (n={size:,})", palette[name]) for name, size in binned.sizes.items()]
    legend_rows, legend_svg = _legend(legend, area.left, area.bottom + _AXIS_H, area.right + _PAD)
    width = max(area.right + _PAD, _title_width(title))
    height = area.bottom + _AXIS_H + legend_rows * _LEGEND_ROW + _PAD

    body = [_title(title, width), *_histogram_axes(area, x_ticks, y_ticks, unit)]
    body += [_step_outline(area, edges, count, palette[name]) for name, count in counts.items()]
    if not counts:
        body.append(
            f'<text x="{_n((area.left + area.right) / 2)}" y="{_n((area.top + area.bottom) / 2)}" '
            f'text-anchor="middle" fill="{_MUTED}">no values</text>'
        )
    body += legend_svg
    return _document(title, width, height, body)


def histogram_edges(
    low: float, high: float, bins: int, *, integer: bool, empty: bool = False
) -> npt.NDArray[np.float64]:
    """Bin edges over the range ``low``..``high`` of the values (``empty``: there are
    none): one bin per integer for integer data spanning fewer than ``bins`` values,
    else ``bins`` equal-width bins."""
    if empty:
        return np.array([0.0, 1.0])
    if integer and high - low < bins and max(-low, high) < 2**40:
        # at least _TICKS bins, so a single value is a bar rather than the whole plot
        extra = max(0.0, _TICKS - 1 - (high - low))
        low, high = low - math.floor(extra / 2), high + math.ceil(extra / 2)
        return np.arange(low - 0.5, high + 1.0, 1.0)
    if low == high:
        half = max(0.5, abs(low) * 1e-6)  # ± 0.5 would vanish in rounding beside 1e20
        return np.linspace(low - half, high + half, bins + 1)
    return np.linspace(low, high, bins + 1)


@dataclass(frozen=True)
class _HistogramArea:
    """A histogram's plot area: where it lies, the values (``low``..``high``) and counts
    (0..``y_max``) it spans, and how those map to SVG coordinates."""

    left: float
    top: float
    low: float
    high: float
    y_max: float

    @property
    def right(self) -> float:
        return self.left + _HIST_W

    @property
    def bottom(self) -> float:
        return self.top + _HIST_H

    def x(self, value: float) -> float:
        return self.left + (value - self.low) / (self.high - self.low) * _HIST_W

    def y(self, count: float) -> float:
        return self.bottom - count / self.y_max * _HIST_H


def _histogram_axes(
    area: _HistogramArea,
    x_ticks: Sequence[tuple[float, str]],
    y_ticks: Sequence[tuple[float, str]],
    unit: str,
) -> list[str]:
    """Grid lines and labels of the count axis, ticks and labels of the value axis."""
    left, right, top, bottom, x, y = area.left, area.right, area.top, area.bottom, area.x, area.y
    body = []
    for value, text in y_ticks:
        at = _n(y(value))
        body.append(_line(left, y(value), right, y(value), _GRID))
        body.append(
            f'<text x="{_n(left - _GAP)}" y="{at}" dy="0.32em" text-anchor="end">{text}</text>'
        )
    for value, text in x_ticks:
        body.append(_line(x(value), bottom, x(value), bottom + 4, _MUTED))
        body.append(
            f'<text x="{_n(x(value))}" y="{_n(bottom + 16)}" text-anchor="middle">{text}</text>'
        )
    body.append(_line(left, top, left, bottom, _MUTED))
    body.append(_line(left, bottom, right, bottom, _MUTED))
    body.append(
        f'<text x="{_n((left + right) / 2)}" y="{_n(bottom + 34)}" text-anchor="middle">'
        f"{_escape(unit)}</text>"
    )
    body.append(
        f'<text transform="translate({_n(_PAD + _TEXT_SIZE)} {_n((top + bottom) / 2)}) '
        f'rotate(-90)" text-anchor="middle">rows</text>'
    )
    return body


def _step_outline(
    area: _HistogramArea, edges: npt.NDArray[np.float64], count: npt.NDArray[Any], colour: str
) -> str:
    """One group's histogram as a filled step outline."""
    path = [f"M{_n(area.x(area.low))} {_n(area.bottom)}"]
    for i, c in enumerate(count.tolist()):
        path.append(f"V{_n(area.y(c))}H{_n(area.x(float(edges[i + 1])))}")
    path.append(f"V{_n(area.bottom)}Z")
    colour = _escape(colour)
    return (
        f'<path class="series" d="{"".join(path)}" fill="{colour}" fill-opacity="0.12" '
        f'stroke="{colour}" stroke-width="1.5" stroke-linejoin="miter"/>'
    )


def _horizontal(
    title: str,
    labels: Sequence[str],
    series: Mapping[str, list[float]],
    unit: str,
    colours: Mapping[str, str],
    *,
    legend: bool,
) -> str:
    totals = [math.fsum(column) for column in zip(*series.values(), strict=True)] or [
        0.0 for _ in labels
    ]
    integer = all(v.is_integer() for values in series.values() for v in values)
    axis_max, ticks = _ticks(0.0, max(totals, default=0.0), integer=integer, from_zero=True)
    shown = [_shorten(_clean(label)) for label in labels]
    label_w = max((_width(s, _LABEL_SIZE, _MONO_ADVANCE) for s in shown), default=0.0)
    total_texts = [_label_number(t) for t in totals]
    value_w = max((_width(t, _TEXT_SIZE, _SANS_ADVANCE) for t in total_texts), default=0.0)
    left = _PAD + label_w + _GAP
    top = _TITLE_H
    bottom = top + _BAND * max(len(labels), 1)
    right = left + _PLOT_W
    entries = [(name, colours[name]) for name in series] if legend else []
    legend_rows, legend_svg = _legend(entries, left, bottom + _AXIS_H, right + _GAP + value_w)
    width = max(right + _GAP + value_w + _PAD, _title_width(title))
    height = bottom + _AXIS_H + legend_rows * _LEGEND_ROW + _PAD

    def x(value: float) -> float:
        return left + value / axis_max * _PLOT_W

    body = [_title(title, width)]
    for value, text in ticks:
        body.append(_line(x(value), top, x(value), bottom, _GRID))
        body.append(
            f'<text x="{_n(x(value))}" y="{_n(bottom + 16)}" text-anchor="middle">{text}</text>'
        )
    body.append(
        f'<text x="{_n((left + right) / 2)}" y="{_n(bottom + 34)}" text-anchor="middle">'
        f"{_escape(unit)}</text>"
    )
    for i, label in enumerate(shown):
        middle = top + _BAND * i + _BAND / 2
        body.append(
            f'<text x="{_n(left - _GAP)}" y="{_n(middle)}" dy="0.32em" text-anchor="end" '
            f'font-family="{_MONO}" font-size="{_LABEL_SIZE}">{_escape(label)}</text>'
        )
        start = 0.0
        for name, values in series.items():
            value = values[i]
            bar_x, bar_w = x(start), value / axis_max * _PLOT_W
            start += value
            body.append(
                f'<rect class="bar" x="{_n(bar_x)}" y="{_n(middle - _BAR / 2)}" '
                f'width="{_n(bar_w)}" height="{_n(_BAR)}" fill="{_escape(colours[name])}"/>'
            )
            text = _label_number(value)
            if legend and value > 0 and bar_w >= _width(text, _TEXT_SIZE, _SANS_ADVANCE) + 6:
                body.append(
                    f'<text x="{_n(bar_x + bar_w / 2)}" y="{_n(middle)}" dy="0.32em" '
                    f'text-anchor="middle" fill="#ffffff">{text}</text>'
                )
        body.append(
            f'<text class="value" x="{_n(x(totals[i]) + 4)}" y="{_n(middle)}" dy="0.32em">'
            f"{total_texts[i]}</text>"
        )
    if not labels:
        body.append(
            f'<text x="{_n((left + right) / 2)}" y="{_n(top + _BAND / 2)}" dy="0.32em" '
            f'text-anchor="middle" fill="{_MUTED}">no data</text>'
        )
    body.append(_line(left, top, left, bottom, _MUTED))
    body.append(_line(left, bottom, right, bottom, _MUTED))
    body += legend_svg
    return _document(title, width, height, body)


def _checked(values: Iterable[int | float], expected: int, name: str) -> list[float]:
    numbers = [float(v) for v in values]
    if len(numbers) != expected:
        raise ValueError(f"{name}: {len(numbers)} values for {expected} labels")
    if not all(math.isfinite(v) and v >= 0 for v in numbers):
        raise ValueError(f"{name}: bar values must be finite and non-negative")
    return numbers


def _colours(names: Sequence[str], chosen: Mapping[str, str] | None) -> dict[str, str]:
    chosen = chosen or {}
    # unnamed series take the colours nobody chose first, then tab10 over again
    spare = itertools.chain([c for c in TAB10 if c not in chosen.values()], itertools.cycle(TAB10))
    return {name: chosen[name] if name in chosen else next(spare) for name in names}


def _ticks(
    low: float, high: float, *, integer: bool, from_zero: bool
) -> tuple[float, list[tuple[float, str]]]:
    """Round ticks for ``[low, high]``: from zero to the first tick at or above ``high``
    (returned as the axis end) when ``from_zero``, else the ticks inside the range."""
    span = high - low
    if span <= 0:
        span = 1.0
    # a range that need not start at a tick gets a finer step, so it still holds a few
    raw = span / (_TICKS if from_zero else _TICKS + 2)
    # the exponent from the decimal text, not log10: identical on every platform's libm
    exponent = int(f"{raw:e}".split("e")[1])
    for multiple in (1, 2, 5, 10):
        step = float(multiple * 10**exponent) if exponent >= 0 else multiple / 10**-exponent
        if step >= raw:
            break
    decimals = max(0, -exponent - (multiple == 10))
    if integer and step < 1:
        step, decimals = 1.0, 0
    if from_zero:
        last = max(1, math.ceil(high / step - 1e-9))
        return last * step, [(k * step, _tick(k * step, decimals)) for k in range(last + 1)]
    first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
    return high, [(k * step, _tick(k * step, decimals)) for k in range(first, last + 1)]


def _tick(value: float, decimals: int) -> str:
    return f"{value + 0.0:,.{decimals}f}".replace("-", "−")


def _legend(
    entries: Sequence[tuple[str, str]], left: float, top: float, right: float
) -> tuple[int, list[str]]:
    """Swatches and names in rows from ``left`` to ``right``: (rows used, SVG elements)."""
    parts: list[str] = []
    rows = 0
    x = right  # forces a first row
    for name, colour in entries:
        label = _shorten(_clean(name))
        item = 14 + _width(label, _TEXT_SIZE, _SANS_ADVANCE) + 16
        if x + item > right and x > left:
            rows += 1
            x = left
        y = top + (rows - 1) * _LEGEND_ROW
        parts.append(
            f'<rect class="legend" x="{_n(x)}" y="{_n(y + 2)}" width="10" height="10" '
            f'fill="{_escape(colour)}"/>'
            f'<text x="{_n(x + 14)}" y="{_n(y + 7)}" dy="0.32em">{_escape(label)}</text>'
        )
        x += item
    return rows, parts


def _title(title: str, width: float) -> str:
    return (
        f'<text x="{_n(width / 2)}" y="22" text-anchor="middle" font-size="{_TITLE_SIZE}">'
        f"{_escape(_clean(title))}</text>"
    )


def _title_width(title: str) -> float:
    return _width(_clean(title), _TITLE_SIZE, _SANS_ADVANCE) + 2 * _PAD


def _line(x1: float, y1: float, x2: float, y2: float, colour: str) -> str:
    return (
        f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" '
        f'stroke="{colour}" stroke-width="1"/>'
    )


def _document(title: str, width: float, height: float, body: Sequence[str]) -> str:
    w, h = math.ceil(width), math.ceil(height)
    label = _escape(_clean(title))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'viewBox="0 0 {w} {h}" role="img" aria-label="{label}" '
        f'font-family="{_SANS}" font-size="{_TEXT_SIZE}" fill="{_INK}">'
        f"<title>{label}</title>"
        f'<rect width="{w}" height="{h}" fill="#ffffff"/>'
        f"{''.join(body)}</svg>\n"
    )


def _n(value: float) -> str:
    """A coordinate with fixed precision (``+ 0.0`` turns ``-0.0`` into ``0.0``)."""
    return f"{round(value, 2) + 0.0:.2f}"


def _label_number(value: float) -> str:
    """A bar's value as its label shows it: thousands separated, two decimals unless whole."""
    if value.is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}"


def _width(text: str, size: float, advance: float) -> float:
    return len(text) * size * advance


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _shorten(text: str) -> str:
    if len(text) <= _MAX_LABEL:
        return text
    keep = (_MAX_LABEL - 1) // 2
    return text[:keep] + "…" + text[-keep:]


def _escape(text: str) -> str:
    return html.escape(_clean(text), quote=True)
