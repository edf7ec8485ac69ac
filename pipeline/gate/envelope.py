"""Checking one whole JSON document (an ARI rubric envelope) with the gate's rules.

An envelope is usually pretty-printed over many lines, so it is not a JSONL line; it is
still one strict JSON value, gated exactly like a line: parse, route by its own version
field, pinned schema, the kind's semantic rules.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.config import CampaignConfig
from pipeline.core.errors import InputError
from pipeline.core.files import read_regular
from pipeline.gate.gate import Gate, GateOutcome

__all__ = ["ENVELOPE_KINDS", "check_envelope"]

ENVELOPE_KINDS = ("ari-replication-rubric-3", "ari-replication-rubric-v2")


def check_envelope(path: Path, config: CampaignConfig) -> GateOutcome:
    """Gate the whole file as one record; only ARI envelope kinds are acceptable."""
    data = read_regular(path, str(path))
    limits = config.limits
    # A document, not a line: allow it to be as large as the file itself.
    config = config.override(**{"limits.max_line_bytes": max(limits.max_line_bytes, len(data))})
    outcome = Gate(config).gate_line(data.strip())
    if outcome.kind is not None and outcome.kind not in ENVELOPE_KINDS:
        raise InputError(f"{path}: a {outcome.kind} record, not an ARI rubric envelope")
    return outcome
