"""Self-contained HTML pages: inline CSS, PNG and SVG images as base64 data URIs, no
script, no fetch.

Every page carries a Content-Security-Policy that forbids loading anything (only
``data:`` images and the inline style), so a page that renders correctly in a browser
is proven not to depend on an external asset. All text goes through :func:`escape`.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable, Sequence
from typing import Final

__all__ = [
    "cell",
    "escape",
    "grouped_table",
    "image",
    "page",
    "section",
    "svg_image",
    "table",
]

_STYLE: Final = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1180px; padding: 0 1rem; color: #1f2328; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #d0d7de; }
.meta { color: #57606a; margin-top: 0; }
table { border-collapse: collapse; margin: .6rem 0; font-variant-numeric: tabular-nums; max-width: 100%; }
th, td { border: 1px solid #d0d7de; padding: .25rem .55rem; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
table.notes td:last-child:not(.num) { overflow-wrap: anywhere; }
th { background: #f6f8fa; } td.num { text-align: right; white-space: nowrap; }
tr.group th { background: #eaeef2; font-weight: 600; }
table.stacked td { white-space: pre-line; }
details summary { cursor: pointer; color: #57606a; }
.warn { background: #fff8c5; border: 1px solid #d4a72c; padding: .5rem .9rem; border-radius: 6px; }
.ok { color: #1a7f37; font-weight: 600; } .bad { color: #cf222e; font-weight: 600; }
.figures { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; } figcaption { color: #57606a; font-size: .85rem; }
img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
code, pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
pre { background: #f6f8fa; padding: .8rem; white-space: pre-wrap; overflow-wrap: anywhere; }
"""
_CSP: Final = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def escape(text: object) -> str:
    """HTML-escape any value's text.

    Examples
    --------
    >>> escape("<b>&")
    '&lt;b&gt;&amp;'
    """
    return html.escape(str(text), quote=True)


def cell(value: object) -> str:
    """A table cell's text: thousands separators for ints, 4 decimals for floats, a dash
    for an undefined number.

    Examples
    --------
    >>> cell(12345), cell(0.123456), cell(None), cell(float("nan"))
    ('12,345', '0.1235', '–', '–')
    """
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def table(
    columns: Sequence[str], rows: Iterable[Sequence[object]], *, css_class: str | None = None
) -> str:
    """An HTML table; numbers are right-aligned. With ``css_class="notes"`` the last
    column's text may break anywhere (long examples, digests), so the table fits the page;
    with ``css_class="stacked"`` a newline in a cell's text starts a new line.

    Examples
    --------
    >>> table(["a"], [[1]])
    '<table><thead><tr><th>a</th></tr></thead><tbody><tr><td class="num">1</td></tr></tbody></table>'
    """
    return grouped_table(columns, [(None, rows)], css_class=css_class)


def grouped_table(
    columns: Sequence[str],
    groups: Iterable[tuple[str | None, Iterable[Sequence[object]]]],
    *,
    css_class: str | None = None,
) -> str:
    """An HTML table whose rows come in groups, each under a heading row spanning every
    column (no heading row where the heading is ``None``).

    Examples
    --------
    >>> grouped_table(["a"], [("g", [[1]])])[48:108]
    '<tr class="group"><th colspan="1">g</th></tr><tr><td class="'
    """
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for heading, rows in groups:
        if heading is not None:
            body.append(
                f'<tr class="group"><th colspan="{len(columns)}">{escape(heading)}</th></tr>'
            )
        for row in rows:
            cells = []
            for value in row:
                numeric = isinstance(value, int | float) and not isinstance(value, bool)
                attribute = ' class="num"' if numeric or value is None else ""
                cells.append(f"<td{attribute}>{escape(cell(value))}</td>")
            body.append(f"<tr>{''.join(cells)}</tr>")
    attribute = f' class="{escape(css_class)}"' if css_class else ""
    return f"<table{attribute}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def image(png: bytes, alt: str, caption: str | None = None) -> str:
    """A PNG embedded as a ``data:`` URI, in a figure with an optional caption."""
    return _figure("image/png", png, alt, caption)


def svg_image(svg: str, alt: str, caption: str | None = None) -> str:
    """An SVG document embedded as a ``data:`` URI, in a figure with an optional caption.

    As an ``<img>`` the SVG runs no script and fetches nothing, and ``img-src data:`` in
    the page's Content-Security-Policy admits it.

    Examples
    --------
    >>> svg_image('<svg xmlns="http://www.w3.org/2000/svg"/>', "empty")[:68]
    '<figure><img alt="empty" src="data:image/svg+xml;base64,PHN2ZyB4bWxu'
    """
    return _figure("image/svg+xml", svg.encode("utf-8"), alt, caption)


def _figure(media_type: str, data: bytes, alt: str, caption: str | None) -> str:
    encoded = base64.b64encode(data).decode("ascii")
    caption_html = f"<figcaption>{escape(caption)}</figcaption>" if caption else ""
    return (
        f'<figure><img alt="{escape(alt)}" src="data:{media_type};base64,{encoded}">'
        f"{caption_html}</figure>"
    )


def section(title: str, *parts: str) -> str:
    return f"<section><h2>{escape(title)}</h2>{''.join(parts)}</section>"


def page(title: str, subtitle: str, sections: Sequence[str]) -> str:
    """A complete HTML document."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f'<body><h1>{escape(title)}</h1><p class="meta">{escape(subtitle)}</p>'
        f"{''.join(sections)}</body></html>\n"
    )
