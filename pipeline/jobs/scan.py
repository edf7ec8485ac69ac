"""``rowgate scan``: what sanitization would do to some inputs, without writing records.

Every line is gated as a run would gate it (strict JSON, routing, schema), with
sanitization off; each accepted record is then inspected under the campaign's policy
(or the built-in one) and each rejected line screened by the raw rule. The report
holds counts only: per kind, field path (indices written ``[*]``) and category, what
would be redacted and what authorised exceptions let stay; how many records would be
quarantined and why; how many rejected lines would lose their raw bytes.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from pipeline.core.config import CampaignConfig
from pipeline.core.reasons import Disposition
from pipeline.gate.gate import Gate
from pipeline.gate.reader import Shard, read_batches
from pipeline.jobs.run import expand_inputs
from pipeline.kinds import KINDS, get_kind
from pipeline.sanitize.sanitizer import Sanitizer

__all__ = ["ScanReport", "scan_inputs"]

_INDEX: Final = re.compile(r"\[\d+\]")


@dataclass
class ScanReport:
    lines: int = 0
    #: gate disposition (sanitization off) → lines
    gated: Counter[str] = field(default_factory=Counter)
    #: (kind, field path, category) → spans that would be replaced
    redacted: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: (kind, field path, category) → detections an authorised exception lets stay
    allowed: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: kind → records with at least one redaction
    records: Counter[str] = field(default_factory=Counter)
    #: (kind, pii.* code) → records that would be quarantined with that reason
    quarantined: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: rejected lines whose raw bytes would be withheld
    raw_withheld: int = 0
    #: kind → records that would be rejected (``pii.unredactable``: a secret number the
    #: schema allows no tag in place of)
    unredactable: Counter[str] = field(default_factory=Counter)
    policy: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        def rows(counter: Counter[tuple[str, str, str]]) -> list[dict[str, Any]]:
            return [
                {"kind": k, "path": p, "category": c, "count": n}
                for (k, p, c), n in sorted(counter.items())
            ]

        return {
            "lines": self.lines,
            "gated": dict(sorted(self.gated.items())),
            "records_with_redactions": dict(sorted(self.records.items())),
            "redacted": rows(self.redacted),
            "allowed": rows(self.allowed),
            "quarantined": [
                {"kind": k, "code": c, "records": n}
                for (k, c), n in sorted(self.quarantined.items())
            ],
            "rejected_raw_withheld": self.raw_withheld,
            "rejected_unredactable": dict(sorted(self.unredactable.items())),
            "policy": self.policy,
        }


def scan_inputs(config: CampaignConfig) -> ScanReport:
    """Scan the config's inputs under its sanitization policy (enabled or not)."""
    sanitizer = Sanitizer.from_config(config, force=True)
    assert sanitizer is not None
    gate = Gate(
        dataclasses.replace(config, sanitize=dataclasses.replace(config.sanitize, enabled=False))
    )
    # The whole policy is checked before any line is read, as for `rowgate run`: a kind
    # or field it misnames fails even where no input holds that kind.
    sanitizer.check({k: gate.kind_gate(kind).entry for k, kind in sorted(KINDS.items())})
    report = ScanReport(policy=sanitizer.describe())
    limits = config.limits
    for input_file in expand_inputs(config.inputs, config):
        for batch in read_batches(
            Shard(0, input_file),
            limits.max_line_bytes,
            config.engine.batch_lines,
            config.engine.batch_bytes,
            gate.lineage.hasher,
        ):
            for i, line in enumerate(batch.lines):
                report.lines += 1
                outcome = gate.gate_line(line, input_file.kind, batch.oversized.get(i))
                report.gated[outcome.disposition.value] += 1
                if outcome.disposition is Disposition.REJECTED:
                    if i not in batch.oversized and sanitizer.raw_reason(line) is not None:
                        report.raw_withheld += 1
                    continue
                assert outcome.kind is not None
                assert outcome.record is not None
                entry = gate.kind_gate(get_kind(outcome.kind)).entry
                result = sanitizer.for_kind(outcome.kind, entry).inspect(outcome.record)
                for (path, category), n in result.redacted.items():
                    report.redacted[(outcome.kind, _INDEX.sub("[*]", path), category.value)] += n
                for (path, category), n in result.allowed.items():
                    report.allowed[(outcome.kind, _INDEX.sub("[*]", path), category.value)] += n
                if result.redacted:
                    report.records[outcome.kind] += 1
                if result.rejected:
                    report.unredactable[outcome.kind] += 1
                    continue
                for code in sorted({p.code for p in result.problems}):
                    report.quarantined[(outcome.kind, code)] += 1
    return report
