"""The Draft 2020-12 metaschema, shipped in the package, as fastjsonschema enforces it.

Seed 000: "Before a campaign uses a schema, validate the schema itself". Every schema
rowgate loads (record kinds, the rubric format) is first validated against the official
2020-12 metaschema and its seven vocabulary metaschemas, which ship byte for byte in
``metaschema-2020-12/`` (BSD-3-Clause, see its ``LICENSE``): no network, ever.

Why the official metaschema and not a hand-written subset (measured, fastjsonschema
2.22): fastjsonschema compiles it (~0.06 s, once per process) but does not know
``$dynamicRef``, so it reads ``{"$dynamicRef": "#meta"}`` as the empty schema. As shipped,
that let 4 of 6 bad schemas through: a wrong ``minLength`` or ``type`` was caught at the
root and nowhere below (``properties``, ``items``, ``$defs``, ``allOf`` members). In the
2020-12 metaschema every ``$dynamicRef`` is ``"#meta"``, and when the metaschema itself is
the schema being applied the dynamic scope starts at its root, whose
``$dynamicAnchor: "meta"`` is therefore the one every ``#meta`` resolves to. Replacing
each ``{"$dynamicRef": "#meta"}`` by ``{"$ref": <the dialect's URI>}`` in the parsed copy
is thus the same schema for this use, and with it all six were refused. A hand-written
subset would be a second description of 2020-12 to keep in step; this is the official one
with one substitution, tested against the JSON-Schema-Test-Suite's metaschema cases.

``format`` stays an annotation (the metaschema declares the format-annotation
vocabulary); a bad ``pattern`` is still refused, when the schema is compiled.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Final

from pipeline.core.reasons import RejectLine
from pipeline.records.strict_json import parse_object

__all__ = ["DIALECT", "METASCHEMA_DIR", "metaschema_documents"]

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
METASCHEMA_DIR: Final = Path(__file__).resolve().parent / "metaschema-2020-12"
_META: Final = "https://json-schema.org/draft/2020-12/meta/"
#: the vocabularies the 2020-12 metaschema is made of (its ``allOf``)
VOCABULARIES: Final = (
    "core",
    "applicator",
    "unevaluated",
    "validation",
    "meta-data",
    "format-annotation",
    "content",
)


def _static(node: Any) -> Any:
    """``node`` with every ``$dynamicRef: "#meta"`` made a ``$ref`` to the metaschema's
    root (see the module docstring)."""
    if isinstance(node, list):
        return [_static(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _static(value) for key, value in node.items()}
    if out.get("$dynamicRef") == "#meta":
        del out["$dynamicRef"]
        out["$ref"] = DIALECT
    elif isinstance(out.get("$dynamicRef"), str):  # a keyword, not the property so named
        raise ValueError(f"unexpected $dynamicRef {out['$dynamicRef']!r} in the metaschema")
    return out


@functools.cache
def metaschema_documents() -> dict[str, dict[str, Any]]:
    """URI → the metaschema document it names (the root and its vocabularies), read from
    the package and adapted for fastjsonschema."""
    files = {DIALECT: METASCHEMA_DIR / "schema.json"}
    files |= {_META + name: METASCHEMA_DIR / "meta" / f"{name}.json" for name in VOCABULARIES}
    documents = {}
    for uri, path in files.items():
        try:
            documents[uri] = _static(
                parse_object(path.read_bytes(), max_depth=64, max_items=10_000)
            )
        except RejectLine as exc:  # pragma: no cover - the shipped files are tested
            raise ValueError(f"{path}: not strict JSON ({exc.reason.code})") from None
    return documents
