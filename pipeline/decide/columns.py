"""The extra output columns the global stages declare (:class:`OutputColumn`).

Apart from :mod:`~pipeline.decide.context` because the write phase's tasks carry them
to the workers: unpickling one there imports this module, which needs no polars (the
context's import of polars cost each worker ~0.3-0.4 s at its first write task).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from pipeline.core.reasons import Disposition

__all__ = ["OutputColumn"]


@dataclass(frozen=True)
class OutputColumn:
    """An extra output column a stage adds, and the dispositions whose files carry it.

    Columns on ``rejected`` must have the same name and type for every kind: the
    ``rejected/`` files are shared by all kinds.
    """

    name: str
    type: pa.DataType
    dispositions: frozenset[Disposition]
    #: whether later stages read it from the state (the policy reads the scores); the
    #: state holds a column for every row, so only such columns are kept in it
    carried: bool = False

    def __post_init__(self) -> None:
        if not self.name.startswith("_"):
            raise ValueError(f"output column {self.name!r} must start with '_'")
