"""Settings of an evaluation report, validated in one place (the CLI only fills them in).

A report runs in one of two modes, chosen by what the settings name:

* ``scored``: a ``confidence`` per row. Calibration (when asked) and the risk-coverage
  curve rank rows by it;
* ``operating_point``: the system's own abstention, a boolean ``selected`` per row
  (answered / decided automatically), as in the ``pw-decide-row`` preset (the
  ``autoqa-criteria`` preset is scored: it has a confidence). Coverage is
  the selected fraction and risk the error rate among selected rows; no curve.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final, Literal

from pipeline.core.config import ConfigError
from pipeline.reports.presets import PRESETS

__all__ = ["DEFAULT_COVERAGES", "DEFAULT_TARGET_RISKS", "ReportMode", "ReportSettings"]

DEFAULT_COVERAGES: Final = (0.5, 0.8, 0.9, 1.0)
DEFAULT_TARGET_RISKS: Final = (0.01, 0.02, 0.05, 0.1)
_MAX_BINS: Final = 1000
_MAX_RESAMPLES: Final = 100_000

ReportMode = Literal["scored", "operating_point"]


@dataclass(frozen=True)
class ReportSettings:
    """What to evaluate and how; every number a report prints depends only on these.

    ``confidence``, ``correct``, ``selected``, ``where`` and each ``by`` entry are a
    column name or a polars SQL expression (``engine.state = 'answered'``).
    """

    confidence: str | None = None
    correct: str | None = None
    selected: str | None = None
    preset: str | None = None
    by: tuple[str, ...] = ()
    where: str | None = None
    #: which ``accepted/<kind>/`` of a run directory to read (a preset implies its kind)
    kind: str | None = None
    #: equal-width bins; equal-mass bins aim for the same number
    bins: int = 15
    #: bootstrap resamples; 0 turns intervals off
    bootstrap: int = 1000
    seed: int = 0
    #: level of bootstrap and Wilson intervals
    level: float = 0.95
    coverages: tuple[float, ...] = DEFAULT_COVERAGES
    target_risks: tuple[float, ...] = DEFAULT_TARGET_RISKS
    #: compute the calibration section (needs ``confidence`` in [0, 1])
    calibration: bool = True
    #: slices with fewer rows get a ``small_slice`` warning
    min_slice_rows: int = 300
    #: largest slices drawn in the HTML report (all slices are in the tables)
    max_plotted_slices: int = 12

    @property
    def mode(self) -> ReportMode:
        preset = PRESETS.get(self.preset) if self.preset is not None else None
        scored = self.confidence is not None or (
            preset is not None and preset.confidence is not None
        )
        return "scored" if scored else "operating_point"

    @property
    def source_kind(self) -> str | None:
        """The kind to read from a run directory: given, or the preset's."""
        if self.kind is None and self.preset is not None:
            return PRESETS[self.preset].kind
        return self.kind

    def validate(self) -> ReportSettings:
        """Check the settings and return them normalised (sorted, de-duplicated targets),
        or raise :class:`ConfigError` naming the offending setting."""
        if self.preset is not None:
            if self.preset not in PRESETS:
                known = ", ".join(sorted(PRESETS))
                raise ConfigError(f"preset: unknown preset {self.preset!r} (known: {known})")
            given = [n for n in ("confidence", "correct", "selected") if getattr(self, n)]
            if given:
                raise ConfigError(
                    f"preset: {self.preset} defines its own expressions; drop {', '.join(given)}"
                )
            preset = PRESETS[self.preset]
            if self.calibration and preset.confidence is None:
                raise ConfigError(
                    f"preset: {self.preset} has no confidence, so no calibration section"
                )
            if self.kind is not None and self.kind != preset.kind:
                raise ConfigError(
                    f"kind: preset {self.preset} reads {preset.kind}, not {self.kind}"
                )
        else:
            if not self.correct:
                raise ConfigError(
                    "correct: an expression for whether each row is correct is required"
                )
            if (self.confidence is None) == (self.selected is None):
                raise ConfigError(
                    "give exactly one of confidence (scored) or selected (abstention)"
                )
            if self.calibration and self.confidence is None:
                raise ConfigError("confidence: calibration needs a confidence expression")
        if not 1 <= self.bins <= _MAX_BINS:
            raise ConfigError(f"bins: must be between 1 and {_MAX_BINS}")
        if not 0 <= self.bootstrap <= _MAX_RESAMPLES:
            raise ConfigError(f"bootstrap: must be between 0 and {_MAX_RESAMPLES}")
        if not 0 <= self.seed < 2**63:
            raise ConfigError("seed: must be a non-negative 64-bit integer")
        if not 0.0 < self.level < 1.0:
            raise ConfigError("level: must be strictly between 0 and 1")
        if any(not 0.0 < c <= 1.0 for c in self.coverages):
            raise ConfigError("coverages: each must be in (0, 1]")
        if any(not 0.0 <= r <= 1.0 for r in self.target_risks):
            raise ConfigError("target_risks: each must be in [0, 1]")
        if self.min_slice_rows < 0 or self.max_plotted_slices < 1:
            raise ConfigError("min_slice_rows must be >= 0 and max_plotted_slices >= 1")
        if len(set(self.by)) != len(self.by) or any(not b.strip() for b in self.by):
            raise ConfigError("by: slice expressions must be non-empty and distinct")
        return dataclasses.replace(
            self,
            coverages=tuple(sorted(set(self.coverages))),
            target_risks=tuple(sorted(set(self.target_risks))),
        )
