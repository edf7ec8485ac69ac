"""The reason catalogue with every plug-in registered: what ``rowgate reasons list``
prints, and the generated part of ``docs/reason-codes.md``.

The catalogue itself is :data:`pipeline.core.reasons.CATALOGUE`; record kinds and
cross-record rules add their codes when they register, so this module imports them first.
"""

from __future__ import annotations

import re
from typing import Final

from pipeline.core.reasons import CATALOGUE, FAMILIES, GATE_CODES, ReasonCode, Spec

__all__ = [
    "CATALOGUE_BEGIN",
    "CATALOGUE_END",
    "catalogue_markdown",
    "reason_codes",
    "with_catalogue",
]

#: The lines around the generated part of ``docs/reason-codes.md``.
CATALOGUE_BEGIN: Final = (
    "<!-- The catalogue below is generated from pipeline/core/reasons.py and the registered "
    "plug-ins: edit those, then run `python docs/generate_reason_codes.py`. -->"
)
CATALOGUE_END: Final = "<!-- End of the generated catalogue. -->"

_GATE_FAMILIES: Final = ("line", "json", "schema")


def reason_codes() -> list[ReasonCode]:
    """Every catalogued reason code, sorted by code, with every kind's record rules and
    every cross-record rule and global stage registered."""
    # importing them registers the kinds with their record rules, the cross rules and the
    # global stages
    import pipeline.decide.stages
    import pipeline.kinds  # noqa: F401

    return list(CATALOGUE)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def _spec_link(spec: Spec) -> str:
    if spec is Spec.ROWGATE:
        return f"[{spec.value}](architecture.md)"
    anchor = re.sub(r"[^\w\- ]", "", spec.value.lower()).replace(" ", "-")
    return f"[{spec.value}](specs.md#{anchor})"


def _table(entries: list[ReasonCode]) -> list[str]:
    lines = ["| code | disposition | meaning | owner | spec |", "|---|---|---|---|---|"]
    lines += [
        f"| `{e.code}` | {e.disposition.value} | {_cell(e.meaning)} | `{e.owner}` "
        f"| {_spec_link(e.spec)} |"
        for e in entries
    ]
    return lines


def catalogue_markdown() -> str:
    """The catalogue as Markdown: the gate's codes in the order the gate checks them, then
    one table per family."""
    entries = reason_codes()
    gate = [CATALOGUE.entry(code) for code in GATE_CODES]
    gate += [e for e in entries if e.family in _GATE_FAMILIES and e not in gate]
    lines = [
        "## Reason codes of the gate",
        "",
        "Checked in this order; a rejected line gets the first that applies (schema "
        "violations are all listed).",
        "",
        *_table(gate),
    ]
    for family, emitted_by in FAMILIES.items():
        if family in _GATE_FAMILIES:
            continue
        lines += [
            "",
            f"## `{family}.*`: {emitted_by}",
            "",
            *_table([e for e in entries if e.family == family]),
        ]
    return "\n".join(lines) + "\n"


def with_catalogue(page: str) -> str:
    """``page`` (the text of ``docs/reason-codes.md``) with the part between
    :data:`CATALOGUE_BEGIN` and :data:`CATALOGUE_END` replaced by the catalogue."""
    head, begin, rest = page.partition(CATALOGUE_BEGIN + "\n")
    _, end, tail = rest.partition(CATALOGUE_END + "\n")
    if not begin or not end:
        raise ValueError(f"the page lacks the lines {CATALOGUE_BEGIN!r} and {CATALOGUE_END!r}")
    return f"{head}{begin}\n{catalogue_markdown()}\n{end}{tail}"
