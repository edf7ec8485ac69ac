"""Engines: where steps run. An engine maps a step over tasks and knows nothing about
what the step does (the gate, the writer); steps know nothing about where they run.

:mod:`~pipeline.engines.base` holds the contract (:class:`Engine`, :class:`Step`,
:data:`Progress`, :class:`EngineError`) and the registry the config's ``engine.name``
chooses from (:func:`register_engine`, :func:`get_engine`); :mod:`~pipeline.engines.local`
is the built-in engine (worker processes on this machine). Engines may import only
``pipeline.core``; an engine for a cluster imports its client library lazily, so that
rowgate runs where it is not installed.
"""

from __future__ import annotations

from pipeline.engines.base import (
    ENGINES,
    Engine,
    EngineError,
    Progress,
    Step,
    get_engine,
    register_engine,
)
from pipeline.engines.local import LocalEngine

__all__ = [
    "ENGINES",
    "Engine",
    "EngineError",
    "LocalEngine",
    "Progress",
    "Step",
    "get_engine",
    "register_engine",
]
