"""pw-decide-row/1 (seed 004): one tool-selection turn decision as a training row."""

from __future__ import annotations

from typing import Any, Final

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
