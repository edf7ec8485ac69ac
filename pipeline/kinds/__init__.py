"""Record kinds: one module per kind, registered by name (DESIGN §2, §3.8).

A kind owns its routing (which version field and value name it), its content
fingerprint, and (later) its semantic rules. Adding a kind means adding one module
here plus its schema in ``schemas/``; modules are discovered, not listed.
"""

from __future__ import annotations

import importlib
import pkgutil

from pipeline.kinds.base import (
    KINDS,
    VERSION_FIELDS,
    RecordKind,
    UnknownKindError,
    check_kind_names,
    get_kind,
    register_kind,
    route,
)

__all__ = [
    "KINDS",
    "VERSION_FIELDS",
    "RecordKind",
    "UnknownKindError",
    "check_kind_names",
    "get_kind",
    "register_kind",
    "route",
]

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in {"base", "rules"}:
        importlib.import_module(f"{__name__}.{_module.name}")
