"""Engines: where steps run. An engine maps a step over tasks and knows nothing about
what the step does (the gate, the writer); steps know nothing about where they run.
Only :mod:`pipeline.engines.ray` (optional) may import ray."""

from __future__ import annotations

from pipeline.engines.local import EngineError, LocalEngine, Progress, Step

__all__ = ["EngineError", "LocalEngine", "Progress", "Step"]
