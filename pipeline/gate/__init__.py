"""Phase 1, the gate: every input line, alone, in parallel shards.

Reads the inputs (:mod:`~pipeline.gate.reader`), parses each line strictly, routes it to
its kind, validates it against the pinned schema, maps it to Arrow
(:mod:`~pipeline.gate.arrow_mapping`), runs the kind's record rules
(:mod:`~pipeline.gate.gate`), and stages the rows per shard for the global phase
(:mod:`~pipeline.gate.staging`). :mod:`~pipeline.gate.envelope` gates one whole document.

May import: :mod:`pipeline.kinds`, :mod:`pipeline.sanitize`, :mod:`pipeline.dedupe`,
:mod:`pipeline.storage`, :mod:`pipeline.engines`, :mod:`pipeline.records`,
:mod:`pipeline.core`.
"""
