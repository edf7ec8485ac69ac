"""Field-aware PII and credential redaction (seed 002, "Heuristic PII and credential
sanitization"; DESIGN §1 "(optional) sanitization").

* :mod:`~pipeline.sanitize.categories` — categories, canonical tags, overlap priority;
* :mod:`~pipeline.sanitize.detectors` — candidate patterns and parser-backed validation;
* :mod:`~pipeline.sanitize.folding` — Unicode spellings read as the ASCII they show;
* :mod:`~pipeline.sanitize.redaction` — overlap merge, replacement, fixpoint (idempotence);
* :mod:`~pipeline.sanitize.paths` — field selectors;
* :mod:`~pipeline.sanitize.policy` — the policy file (what is scanned, what may stay);
* :mod:`~pipeline.sanitize.records` — one record: walk, redact, re-validate, quarantine;
* :mod:`~pipeline.sanitize.code` — does redacted code still parse;
* :mod:`~pipeline.sanitize.raw` — the raw bytes of rejected lines;
* :mod:`~pipeline.sanitize.sanitizer` — what the gate calls;
* :mod:`~pipeline.jobs.scan` — ``rowgate scan``: what would be redacted.

Nothing matched is ever written anywhere: reasons, counts and the manifest carry
categories, counts and safe field paths only.
"""

from __future__ import annotations

from pipeline.sanitize.categories import Category, tag
from pipeline.sanitize.policy import DEFAULT_POLICY, SanitizePolicy, load_policy
from pipeline.sanitize.records import RecordSanitizer, SanitizedRecord
from pipeline.sanitize.sanitizer import SANITIZER_VERSION, Sanitizer

__all__ = [
    "DEFAULT_POLICY",
    "SANITIZER_VERSION",
    "Category",
    "RecordSanitizer",
    "SanitizePolicy",
    "SanitizedRecord",
    "Sanitizer",
    "load_policy",
    "tag",
]
