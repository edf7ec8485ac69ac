"""pw-decide-row/1 (seed 004): one tool-selection turn decision as a training row."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from pipeline.dedupe.keys import DedupeKey, KeyField
from pipeline.kinds.base import RecordKind, register_kind
from pipeline.lineage import ContentFingerprint

CONTENT: Final = ContentFingerprint(b"rowgate:pw-decide-row-content:v1\x00")


@register_kind
class PwDecideRow(RecordKind):
    id = "pw-decide-row-1"
    version_field = "schema"
    version_value = "pw-decide-row/1"

    def fingerprint(self, record: dict[str, Any]) -> str:
        """The decision itself: state read, options offered, engine answer, labels.

        Receipt, session ids, ``judge`` and ``meta`` are provenance, not content; ``meta``
        is never a training feature (seed 004).
        """
        return CONTENT.digest(
            tuple(
                ContentFingerprint.json_field(record[name])
                for name in ("state", "offered", "engine", "labels")
            )
        )

    def dedupe_key(self) -> DedupeKey:
        """The state the engine read and the options offered (as sets): one decision, so
        the same decision in train and eval is caught whatever its labels say. ``meta``
        groups (task, repository, prompt group) must not straddle splits (seed 004: "consumers
        may group by it")."""
        offered = pl.col("offered")
        options = pl.concat_list(
            *(
                offered.struct.field(name).list.eval(pl.lit(f"{name}:") + pl.element())
                for name in ("floor", "loadable", "guides")
            )
        )
        return DedupeKey(
            "state + offered options",
            ("state", "offered"),
            (
                KeyField("state", pl.col("state")),
                KeyField("offered", options, prose=False, unordered=True),
            ),
            split_groups=("meta.task", "meta.repository", "meta.group"),
        )
