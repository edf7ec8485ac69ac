"""Report figures as matplotlib :class:`~matplotlib.figure.Figure` objects and PNG bytes.

Figures are built without pyplot (no global figure registry, nothing to close, safe in
worker threads) and rendered by the Agg canvas. PNGs carry no ``Software`` metadata,
so the same numbers give the same bytes. Inputs are plain arrays and lists: the plots
know nothing of how the numbers were computed.

Every string is drawn as written: titles, labels and legends hold user data (``--by``
slice values such as ``$5-$10 plan``), and matplotlib would otherwise read text between
two ``$`` as a mathtext formula (``$\\frac{`` even raises). Each function here builds and
renders under :func:`literal_text`, which turns mathtext and TeX off; tick labels are
created lazily at draw time, so rendering needs it as much as building.
"""

from __future__ import annotations

import functools
import io
import warnings
from collections.abc import Callable, Sequence
from typing import Final, ParamSpec, TypeVar

import matplotlib
import numpy as np
import numpy.typing as npt
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = [
    "MAX_CURVE_POINTS",
    "bar_figure",
    "figure_png",
    "forest_figure",
    "literal_text",
    "operating_points_figure",
    "reliability_figure",
    "risk_coverage_figure",
]

#: Points drawn per risk-coverage curve; longer curves are thinned evenly (tables keep all).
MAX_CURVE_POINTS: Final = 2000
_DPI: Final = 100

FloatArray = npt.NDArray[np.float64]
Numbers = Sequence[float | None] | FloatArray

_P = ParamSpec("_P")
_R = TypeVar("_R")


def literal_text(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``function`` with every string drawn literally (see the module docstring)."""

    @functools.wraps(function)
    def literal(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        # text is text: no mathtext between "$" signs, no TeX
        with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
            return function(*args, **kwargs)

    return literal


@literal_text
def figure_png(figure: Figure) -> bytes:
    """Render ``figure`` to PNG bytes with the Agg backend.

    Examples
    --------
    >>> figure_png(Figure(figsize=(1, 1)))[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
    """
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # a character the font lacks (a slice value in CJK, an emoji) is drawn as a box;
        # matplotlib's warning of each, on stderr, would say so again and again
        warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
        figure.savefig(buffer, format="png", dpi=_DPI, metadata={"Software": None})
    return buffer.getvalue()


def _array(values: Numbers) -> FloatArray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


@literal_text
def reliability_figure(
    title: str,
    lower: Numbers,
    upper: Numbers,
    count: Numbers,
    mean_confidence: Numbers,
    accuracy: Numbers,
    wilson_low: Numbers,
    wilson_high: Numbers,
) -> Figure:
    """Reliability diagram: accuracy per bin against the diagonal, Wilson error bars at
    each bin's mean confidence, and the count histogram below.

    Examples
    --------
    >>> fig = reliability_figure("all", [0, .5], [.5, 1], [2, 3], [.25, .68], [0, 1], [0, .44], [.66, 1])
    >>> len(fig.axes)
    2
    """
    lo, hi, n = _array(lower), _array(upper), _array(count)
    conf, acc = _array(mean_confidence), _array(accuracy)
    wl, wh = _array(wilson_low), _array(wilson_high)
    figure = Figure(figsize=(5.2, 5.7), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    centres, widths = (lo + hi) / 2, hi - lo
    top.plot([0, 1], [0, 1], linestyle="--", color="0.5", linewidth=1, label="perfect calibration")
    has = n > 0
    top.bar(
        centres[has],
        acc[has],
        width=widths[has],
        color="tab:blue",
        alpha=0.25,
        edgecolor="tab:blue",
        label="accuracy per bin",
    )
    top.errorbar(
        conf[has],
        acc[has],
        # Wilson intervals contain the proportion; the clip only absorbs float rounding
        yerr=np.maximum(np.vstack([acc[has] - wl[has], wh[has] - acc[has]]), 0.0),
        fmt="o",
        color="tab:blue",
        markersize=4,
        capsize=2,
        label="at mean confidence (Wilson)",
    )
    top.set(xlim=(0, 1), ylim=(0, 1.02), ylabel="accuracy", title=title)
    bottom.bar(centres, n, width=widths, color="0.45", edgecolor="white")
    bottom.set(xlabel="confidence", ylabel="rows")
    # below both axes: inside, the legend hid the low-confidence bins
    figure.legend(loc="outside lower center", ncols=2, fontsize="small", frameon=False)
    return figure


def _thin(x: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    if x.size <= MAX_CURVE_POINTS:
        return x, y
    keep = np.unique(np.linspace(0, x.size - 1, MAX_CURVE_POINTS).round().astype(np.int64))
    return x[keep], y[keep]


@literal_text
def risk_coverage_figure(
    title: str,
    curves: Sequence[tuple[str, Numbers, Numbers]],
    optimal: tuple[Numbers, Numbers] | None = None,
) -> Figure:
    """Risk against coverage for each ``(label, coverage, risk)`` curve, with the optimal
    (oracle) curve of the first one dashed.

    Examples
    --------
    >>> fig = risk_coverage_figure("rc", [("all", [.5, 1], [0, .5])], ([.5, 1], [0, .5]))
    >>> fig.axes[0].get_xlabel()
    'coverage'
    """
    figure = Figure(figsize=(7.6, 4.6), layout="constrained")
    axes = figure.subplots()
    top = 0.0
    for label, coverage, risk in curves:
        x, y = _thin(_array(coverage), _array(risk))
        axes.plot(
            np.concatenate([[0.0], x]),
            np.concatenate([[y[0] if y.size else 0.0], y]),
            label=label,
            linewidth=1.4,
        )
        top = max(top, float(np.nanmax(y)) if y.size else 0.0)
    if optimal is not None:
        x, y = _thin(_array(optimal[0]), _array(optimal[1]))
        axes.plot(x, y, linestyle="--", color="black", linewidth=1, label="optimal (all)")
    axes.set(
        xlim=(0, 1),
        ylim=(0, max(top * 1.1, 0.05)),
        xlabel="coverage",
        ylabel="risk (error rate among selected)",
        title=title,
    )
    axes.grid(alpha=0.3)
    # outside the axes: inside, any corner covers some slice's curve
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    return figure


@literal_text
def forest_figure(
    labels: Sequence[str],
    panels: Sequence[tuple[str, Numbers, Numbers, Numbers]],
) -> Figure:
    """One row per slice, one panel per metric ``(name, value, low, high)``; the first
    label's value (the whole data) is the dotted reference line.

    Examples
    --------
    >>> fig = forest_figure(["all", "a"], [("ECE", [.1, .2], [.05, .1], [.15, .3])])
    >>> fig.axes[0].get_title()
    'ECE'
    """
    rows = len(labels)
    figure = Figure(figsize=(4.0 * len(panels) + 2.2, 0.42 * rows + 1.4), layout="constrained")
    axes = np.atleast_1d(figure.subplots(1, len(panels), sharey=True))
    y = np.arange(rows)[::-1]
    for ax, (name, value, low, high) in zip(axes, panels, strict=True):
        v, lo, hi = _array(value), _array(low), _array(high)
        known = np.isfinite(lo) & np.isfinite(hi)
        # lines, not error bars: a percentile interval need not contain the point
        # estimate (ECE is biased upwards under resampling)
        ax.hlines(y[known], lo[known], hi[known], color="tab:blue", linewidth=1.5)
        ax.plot(lo[known], y[known], "|", hi[known], y[known], "|", color="tab:blue")
        ax.plot(v, y, "o", color="tab:blue")
        if np.isfinite(v[0]):
            ax.axvline(v[0], color="0.5", linestyle=":", linewidth=1)
        ax.set_title(name)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, labels=list(labels))
    return figure


@literal_text
def operating_points_figure(
    labels: Sequence[str],
    coverage: Numbers,
    risk: Numbers,
    coverage_interval: tuple[Numbers, Numbers],
    risk_interval: tuple[Numbers, Numbers],
) -> Figure:
    """Each slice as a point on the risk-coverage plane, with its intervals.

    Examples
    --------
    >>> fig = operating_points_figure(["all"], [.5], [.1], ([.4], [.6]), ([.05], [.2]))
    >>> fig.axes[0].get_ylabel()
    'risk (error rate among answered)'
    """
    figure = Figure(figsize=(6.0, 4.6), layout="constrained")
    axes = figure.subplots()
    c, r = _array(coverage), _array(risk)
    cl, ch = _array(coverage_interval[0]), _array(coverage_interval[1])
    rl, rh = _array(risk_interval[0]), _array(risk_interval[1])
    for i, label in enumerate(labels):
        if not np.isfinite(r[i]):
            continue
        (point,) = axes.plot(c[i], r[i], "o", label=label)
        colour = point.get_color()
        if np.isfinite(cl[i]) and np.isfinite(ch[i]):
            axes.hlines(r[i], cl[i], ch[i], color=colour, linewidth=1.2)
        if np.isfinite(rl[i]) and np.isfinite(rh[i]):
            axes.vlines(c[i], rl[i], rh[i], color=colour, linewidth=1.2)
    axes.set(
        xlim=(0, 1.02),
        ylim=(
            0,
            max(float(np.nanmax(np.append(rh, r))) * 1.1 if np.isfinite(r).any() else 0, 0.05),
        ),
        xlabel="coverage (share answered)",
        ylabel="risk (error rate among answered)",
    )
    axes.grid(alpha=0.3)
    if len(labels) <= 15:
        axes.legend(fontsize="small", loc="best")
    return figure


@literal_text
def bar_figure(title: str, labels: Sequence[str], values: Sequence[float], xlabel: str) -> Figure:
    """Horizontal bars, the first label on top.

    Examples
    --------
    >>> bar_figure("reasons", ["json.syntax"], [3], "rows").axes[0].get_title()
    'reasons'
    """
    figure = Figure(figsize=(7.0, 0.32 * len(labels) + 1.2), layout="constrained")
    axes = figure.subplots()
    y = np.arange(len(labels))[::-1]
    axes.barh(y, values, color="tab:red", alpha=0.8)
    axes.set_yticks(y, labels=list(labels))
    axes.set(xlabel=xlabel, title=title)
    axes.grid(axis="x", alpha=0.3)
    return figure
