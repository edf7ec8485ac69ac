"""Global-phase stage plug-ins: one module per stage, discovered, run by ``order``.

A stage module defines a class implementing :class:`pipeline.decide.context.GlobalStage`
and registers it with :func:`pipeline.decide.context.register_stage`. Conventional
orders: cross-record rules 100, review policy 150, dedupe 200, rubric scoring 300, decision policy 400.
"""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
