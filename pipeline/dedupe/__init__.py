"""Deduplication (DESIGN §3.9): exact, normalised and near duplicates, split contamination.

* :mod:`~pipeline.dedupe.keys` — what "the same row" means per record kind;
* :mod:`~pipeline.dedupe.normalise` — NFC, whitespace and case folding;
* :mod:`~pipeline.dedupe.minhash` — shingles, MinHash, LSH, exact Jaccard check;
* :mod:`~pipeline.dedupe.clusters` — survivors, removals, contamination, clusters;
* :mod:`~pipeline.dedupe.participants` — the rows that take part, found on the engine;
* :mod:`~pipeline.dedupe.table` — all of it over one kind's rows (a run's or a dataset's);
* :mod:`~pipeline.dedupe.splits` — groups (task, ``meta``) that straddle splits.

The run's global stage is :mod:`pipeline.decide.stages.dedupe`; ``rowgate dedupe`` runs the same
code on existing Parquet datasets (:mod:`pipeline.jobs.dedupe`).
"""

from __future__ import annotations

from pipeline.dedupe.keys import DedupeKey, KeyField
from pipeline.dedupe.normalise import Normalisation

__all__ = ["DedupeKey", "KeyField", "Normalisation"]
