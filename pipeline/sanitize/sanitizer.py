"""The sanitizer as the gate sees it: built once per process from the campaign config,
one call per accepted record and one per rejected line.

Off by default (``[sanitize] enabled = false``): the gate then holds ``None`` and pays
one ``is not None`` test per line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pipeline.core.config import CampaignConfig, ConfigError
from pipeline.core.reasons import LINE_TOO_LARGE, Reason
from pipeline.records.schemas import SchemaEntry
from pipeline.sanitize.paths import SelectorError
from pipeline.sanitize.policy import DEFAULT_POLICY, SanitizePolicy, load_policy
from pipeline.sanitize.raw import RawScreen
from pipeline.sanitize.records import RecordSanitizer, SanitizedRecord

__all__ = ["SANITIZER_VERSION", "UNSANITIZED_CODES", "Sanitizer", "policy_path"]

#: Bumped whenever a detector or the redaction rules change what a record becomes; the
#: manifest records it next to the policy digest (seed 002: receipts bind the
#: "sanitizer version"). 2: Markdown emphasis, Unicode spellings (fullwidth, other
#: scripts' digits, invisible characters), member names under a ``.*`` selector, and any
#: value after a secret-named member of a rejected line are found. 3: undashed SSNs and
#: CPFs in emphasis after their cue word, underscores inside a mail domain's labels, the
#: combining marks after a value (redacted with it), folded spellings of an exception's
#: networks and mail domains (allowed), ideographic full stops as a mail domain's dots
#: (``alice@gmail。com``) and combining diacritics inside a value
#: (``jose\u0301@gmail.com``, ``202\u0301-555-0143``: redacted whole). One version a
#: landing: its commits changed what a record becomes twice, and no build between them
#: was ever released.
SANITIZER_VERSION = "rowgate-sanitizer/4"
#: First reason codes of the rows the sanitizer never sees, even when it is on: a line
#: over the byte limit is neither parsed nor held (its ``_raw`` is always null). Every
#: other row's record or raw bytes went through it: its ``_sanitizer`` is the version.
UNSANITIZED_CODES: Final = frozenset({LINE_TOO_LARGE})


def policy_path(config: CampaignConfig) -> Path:
    """The policy file a campaign uses (relative to the config: see ``resolve_path``)."""
    given = config.sanitize.policy
    return DEFAULT_POLICY if given is None else config.resolve_path(given)


class Sanitizer:
    def __init__(self, policy: SanitizePolicy) -> None:
        self.policy = policy
        self.raw = RawScreen(policy)
        self._kinds: dict[str, RecordSanitizer] = {}

    @classmethod
    def from_config(cls, config: CampaignConfig, *, force: bool = False) -> Sanitizer | None:
        """The campaign's sanitizer, or None when sanitization is off (unless ``force``)."""
        if not (config.sanitize.enabled or force):
            return None
        return cls(load_policy(policy_path(config), config.sanitize.policy_sha256))

    def check(self, entries: Mapping[str, SchemaEntry]) -> None:
        """Check the policy against every record kind there is (``entries``: each one's
        schema entry), before any line is read: each kind it names must exist, and each
        field path it gives a kind must be one that kind's schema can hold."""
        try:
            self.policy.check_kinds(entries.keys())
        except ConfigError as exc:
            raise ConfigError(f"sanitize policy {self.policy.source}: {exc}") from None
        for kind, entry in entries.items():
            self.for_kind(kind, entry)

    def for_kind(self, kind: str, entry: SchemaEntry) -> RecordSanitizer:
        found = self._kinds.get(kind)
        if found is None:
            try:
                found = RecordSanitizer(self.policy, kind, entry)
            except SelectorError as exc:
                raise ConfigError(f"sanitize policy {self.policy.source}: {exc}") from None
            self._kinds[kind] = found
        return found

    def sanitize(
        self, kind: str, entry: SchemaEntry, record: dict[str, Any]
    ) -> SanitizedRecord | None:
        """What sanitizing changed, or None when the record stays as it is."""
        result = self.for_kind(kind, entry).inspect(record)
        return result if result.redacted or result.problems else None

    def raw_reason(self, line: bytes) -> Reason | None:
        """``pii.raw_withheld`` when a rejected line's ``_raw`` must be null."""
        return self.raw.reason(line)

    def describe(self) -> dict[str, Any]:
        """For the manifest: sanitizer version, policy identity and scope."""
        return {"sanitizer_version": SANITIZER_VERSION, **self.policy.describe()}
