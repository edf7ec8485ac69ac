"""The campaign config: one TOML file → one typed, validated object (DESIGN §3.13).

Every capability reads its settings from :class:`CampaignConfig`; CLI flags override
single values through :meth:`CampaignConfig.override`. Unknown keys are errors that name
their path, so a typo never silently falls back to a default. Every numeric setting is
declared with its :class:`Bounds` (:func:`bounded`), checked on load and on every
override: a value that would hang the run or exhaust the machine is an error naming its
key, never a surprise after the gate.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar, Union

from pipeline.core.errors import EXIT_USAGE, RowgateError
from pipeline.core.files import read_regular
from pipeline.core.limits import (
    BATCH_BYTES,
    MAX_DECOMPRESSED_BYTES,
    MAX_EXPANSION_RATIO,
    MAX_NESTING,
)

__all__ = [
    "Bounds",
    "CampaignConfig",
    "ConfigError",
    "DedupeSettings",
    "EngineSettings",
    "InputSpec",
    "KindPolicy",
    "KindScoring",
    "Limits",
    "LineageSettings",
    "OutputSettings",
    "RubricSettings",
    "RunSettings",
    "SanitizeSettings",
    "bounded",
    "build_section",
    "check_bounds",
    "check_ray_address",
    "did_you_mean",
    "load_campaign",
    "parse_toml",
    "recorded_config",
]

MiB: Final = 1 << 20
#: values of ``[scoring.<kind>] review_policy``
REVIEW_POLICY_MODES: Final = ("apply", "record")
#: upper bound of ``rules.max_conversation_chars``: a pairwise row's 64 messages, two
#: responses, rationale and patch at their schema maxima hold fewer characters
MAX_CONVERSATION_CHARS: Final = 64 * 32_000 + 3 * 64_000 + 4_000
GiB: Final = 1 << 30
_SHA256: Final = re.compile(r"[0-9a-f]{64}")


class ConfigError(RowgateError, ValueError):
    """An invalid campaign config or flag, with the path of the offending key."""

    exit_code: ClassVar[int] = EXIT_USAGE


@dataclass(frozen=True)
class Bounds:
    """The range a numeric setting must lie in (ends included unless ``*_open``), and
    why its upper end is where it is."""

    low: float
    high: float
    why: str
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below  # NaN is neither

    def __str__(self) -> str:
        return f"{'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"


def bounded(
    default: Any,
    low: float,
    high: float,
    why: str,
    *,
    low_open: bool = False,
    high_open: bool = False,
    listed_when_set: bool = False,
) -> Any:
    """A numeric setting's field: its default and its :class:`Bounds`; ``listed_when_set``:
    the effective config (:meth:`CampaignConfig.as_dict`) lists it only when it is not
    ``None``, so adding the setting changed no earlier run's manifest."""
    metadata: dict[str, Any] = {"bounds": Bounds(low, high, why, low_open, high_open)}
    if listed_when_set:
        metadata["listed_when_set"] = True
    return field(default=default, metadata=metadata)


def check_bounds(section: Any, path: str = "") -> None:
    """Raise :class:`ConfigError` for the first setting of ``section`` (a config
    dataclass, walked into its nested sections) outside its :class:`Bounds`."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        where = f"{path}.{f.name}" if path else f.name
        bounds = f.metadata.get("bounds")
        if bounds is not None and value is not None and value not in bounds:
            raise ConfigError(f"{where}: must be in {bounds} (got {value}): {bounds.why}")
        children = value.items() if isinstance(value, dict) else [(None, value)]
        for key, child in children:
            if dataclasses.is_dataclass(child) and not isinstance(child, type):
                check_bounds(child, where if key is None else f"{where}.{key}")


@dataclass(frozen=True)
class Limits:
    """Bounds checked before and during parsing (DESIGN §3.2)."""

    #: Longest line accepted, in bytes; longer lines are rejected unparsed (line.too_large).
    max_line_bytes: int = bounded(
        8 * MiB, 1, GiB, "a line is held whole, and stored whole in an Arrow column (2 GiB at most)"
    )
    #: Deepest nesting accepted; ``{}`` has depth 1 (json.too_deep).
    max_depth: int = bounded(
        64, 1, MAX_NESTING, "records are hashed through orjson, which writes no deeper"
    )
    #: Most members of one object or elements of one array (json.too_many_items).
    max_items: int = bounded(
        10_000, 1, GiB, "a line of at most 1 GiB holds fewer items (each takes 2 bytes or more)"
    )
    #: Most bytes one compressed input may decompress to (the spill copies them to disk);
    #: more is an input error (exit 3), never a filled disk.
    max_decompressed_bytes: int = bounded(
        MAX_DECOMPRESSED_BYTES, MiB, 1 << 50, "1 PiB: beyond any one input file"
    )
    #: Most bytes one compressed input may decompress to per byte of its file (checked
    #: once its stream passes 64 MiB): exports compress 5-10x, bombs 1000x and more.
    max_expansion_ratio: int = bounded(
        MAX_EXPANSION_RATIO, 1, 100_000, "zstd's own ceiling is ~32000x: higher bounds nothing"
    )

    def validate(self, path: str) -> None:
        check_bounds(self, path)


@dataclass(frozen=True)
class InputSpec:
    """One input file: its path as given, and optionally its declared kind and split."""

    path: str
    kind: str | None = None
    split: str | None = None

    @classmethod
    def labelled(cls, option: str, kind: str | None = None) -> InputSpec:
        """An input from a ``SPLIT=PATH`` option (``--split eval=b.jsonl``)."""
        split, sep, path = option.partition("=")
        if not sep or not split.strip() or not path:
            raise ConfigError(f"--split {option!r}: expected SPLIT=PATH, e.g. eval=b.jsonl")
        return cls(path, kind, split.strip())


@dataclass(frozen=True)
class EngineSettings:
    #: The registered engine to run on (:func:`pipeline.engines.get_engine`).
    name: str = "local"
    #: Worker processes; ``None`` means one per available core, but no more than the
    #: run's shards when they are known before gating (not while a compressed input is
    #: spilled); a one-shard export is gated in the calling process.
    workers: int | None = bounded(
        None,
        1,
        256,
        "the local engine's workers share one machine, each costing 0.1-0.3 GB and 0.5 s "
        "to start, and the gate is CPU-bound: more workers than cores only cost memory",
    )
    #: Inputs are cut into shards of about this many bytes, on line boundaries.
    #: Shards, not workers, fix the output files, so output is worker-count independent.
    shard_bytes: int = bounded(
        64 * MiB, 4096, 1 << 40, "1 TiB: beyond it every input is one shard anyway"
    )
    #: Decompress each compressed input once into spill shards in the run's staging
    #: directory, so that all workers gate it (needs temporary disk space equal to its
    #: decompressed size); ``false``: one worker reads the whole stream, and the global
    #: phase's per-shard working sets then grow with that stream (one shard at a time).
    spill_compressed: bool = True
    #: Lines gated and converted to Arrow at a time inside a worker...
    batch_lines: int = bounded(
        4096, 1, 1 << 20, "a batch holds Python objects per line: ~0.1 GB per million lines"
    )
    #: ...or fewer: a batch ends once it holds this many bytes of lines, so that a
    #: worker's memory does not grow with the lines' length.
    batch_bytes: int = bounded(
        BATCH_BYTES, 1, GiB, "a batch becomes Arrow columns, and one column holds 2 GiB at most"
    )
    #: The Ray engine: the cluster to join (``HOST:PORT`` or ``ray://HOST:PORT``); unset:
    #: ``RAY_ADDRESS`` if set, else a private local Ray of ``workers`` CPUs.
    address: str | None = None
    #: The Ray engine: how often a task whose worker or node died is run again before
    #: the run fails (exit 4); a step's own error is never retried.
    max_retries: int = bounded(
        3, 0, 100, "a task that kills its worker 100 times will not succeed the 101st"
    )
    #: Partitions of each of the global phase's partitioned steps (near-dedupe candidates,
    #: the hash-first checks), each step taking no more than its entries; unset: each
    #: step's own, from its size (:func:`pipeline.dedupe.partitions.partitions_for`).
    #: Outputs are the same for any count.
    partitions: int | None = bounded(
        None,
        1,
        1 << 16,
        "every partition task opens every shard's entries: more partitions than this "
        "make many more, smaller reads",
        listed_when_set=True,
    )

    def validate(self, path: str) -> None:
        check_bounds(self, path)
        if self.address is not None:
            check_ray_address(self.address, f"{path}.address")
        # ``name`` is checked against the engine registry when a run builds its engine
        # (pipeline.engines.get_engine): engines are plug-ins, registered above this layer.

    def resolved_workers(self, shards: int | None = None) -> int:
        """The configured count; by default one per available core, but no more than
        ``shards`` when the run knows how many it will have."""
        if self.workers is not None:
            return self.workers
        try:
            cores = max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # pragma: no cover - not Linux
            cores = max(1, os.cpu_count() or 1)
        return cores if shards is None else max(1, min(cores, shards))


#: A Ray address: ``HOST:PORT`` (a bracketed IPv6 host too) or ``ray://HOST:PORT``, the
#: port 1-65535; or ``auto`` or ``local``, which Ray resolves itself.
_RAY_ADDRESS: Final = re.compile(r"(?:ray://)?(?:\[([0-9A-Fa-f:.]+)\]|([^\s:/\[\]]+)):([0-9]{1,5})")


def check_ray_address(address: str, where: str) -> tuple[str, int] | None:
    """The host and port of a Ray address (``None``: ``auto`` or ``local``, which Ray
    resolves itself), or a :class:`ConfigError` naming ``where``. Ray took ``not a
    host`` with exit 4, and ``127.0.0.1:0`` or ``:99999`` by retrying for minutes with
    signals held."""
    if address in ("auto", "local"):
        return None
    match = _RAY_ADDRESS.fullmatch(address)
    if match is None or not 1 <= int(match.group(3)) <= 65535:
        raise ConfigError(
            f"{where}: not a Ray address: {address!r} (HOST:PORT or ray://HOST:PORT with "
            "a port from 1 to 65535, auto or local)"
        )
    return match.group(1) or match.group(2), int(match.group(3))


#: Parquet codecs, and the compression levels each accepts (None: it takes no level).
#: zstd's negative "fast" levels are left out; gzip and lz4 as Arrow bounds them.
CODEC_LEVELS: Final[dict[str, tuple[int, int] | None]] = {
    "zstd": (1, 22),
    "gzip": (1, 9),
    "lz4": (1, 12),
    "snappy": None,
    "none": None,
}


@dataclass(frozen=True)
class OutputSettings:
    compression: str = "zstd"
    #: ``None``: the codec's default. Arrow accepted any zstd level (1000 too) and
    #: failed on an out-of-range gzip one only when the first file was written.
    compression_level: int | None = bounded(
        None, 1, 22, "the highest level of any codec (zstd); each codec bounds it further"
    )

    def validate(self, path: str) -> None:
        check_bounds(self, path)
        if self.compression not in CODEC_LEVELS:
            raise ConfigError(f"{path}.compression: unknown codec {self.compression!r}")
        levels = CODEC_LEVELS[self.compression]
        level = self.compression_level
        if level is not None and levels is None:
            raise ConfigError(
                f"{path}.compression_level: {self.compression!r} takes no compression level"
            )
        if level is not None and levels is not None and not levels[0] <= level <= levels[1]:
            raise ConfigError(
                f"{path}.compression_level: must be in [{levels[0]}, {levels[1]}] for "
                f"{self.compression} (got {level})"
            )


@dataclass(frozen=True)
class RunSettings:
    """How a finished run is judged (the CLI's exit code; OUT is written either way)."""

    #: A run whose rejected and quarantined lines exceed this share of its lines exits
    #: with its own code (5) after writing OUT; ``None``: any share is a success.
    max_rejected_share: float | None = bounded(None, 0.0, 1.0, "a share of the run's lines")

    def validate(self, path: str) -> None:
        check_bounds(self, path)


@dataclass(frozen=True)
class SchemaSettings:
    #: Where the schemas live; default: the ``schemas/`` directory shipped with rowgate.
    #: Relative to the config file.
    directory: str | None = None
    #: Schema id → SHA-256 the file must have; a mismatch fails the run.
    pins: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReferenceTable:
    """A reference table file (JSONL or Parquet) and the SHA-256 it must have."""

    path: str
    sha256: str | None = None


@dataclass(frozen=True)
class References:
    #: rows {id, sha256, text}: grounded-QA citations are checked against them
    documents: ReferenceTable | None = None
    #: rows {id}: document ids agent traces may retrieve
    authorised_documents: ReferenceTable | None = None
    #: rows {contractId, contractVersion, contractSha256, status, decisionTargets, criteria,
    #: rules, ...}: the AutoQA evaluation contracts autoqa-eval-1 documents reference
    contracts: ReferenceTable | None = field(default=None, metadata={"listed_when_set": True})


@dataclass(frozen=True)
class RuleSettings:
    """Settings of the per-record and cross-record rules."""

    #: reason codes of rules to skip, e.g. "semantic.pairwise-v2.rationale_consistency"
    disabled: tuple[str, ...] = ()
    #: rubric versions pairwise rows may name; empty: any (rule not applied)
    rubric_versions: tuple[str, ...] = ()
    #: bound on an agent trace's total text (prompt, queries, answer), in characters
    max_trace_chars: int = bounded(65_536, 1, GiB, "a line of at most 1 GiB holds fewer characters")
    #: bound on a pairwise row's total text (messages, responses, rationale, patch), in
    #: characters: every field at its schema maximum once, plus a 64k conversation
    max_conversation_chars: int = bounded(
        262_144, 1, MAX_CONVERSATION_CHARS, "every field of a pairwise row at its schema maximum"
    )
    #: a rationale needs at least this many distinct words of two or more letters
    min_rationale_words: int = bounded(
        4, 0, 10_000, "a rationale is a paragraph, not a book: more would reject every row"
    )

    def validate(self, path: str) -> None:
        check_bounds(self, path)
        for code in self.disabled:
            if not code.startswith(("semantic.", "cross.")):
                raise ConfigError(f"{path}.disabled: {code!r} is not a rule code")


@dataclass(frozen=True)
class RubricSettings:
    #: Where rubric files live; default: the ``rubrics/`` directory shipped with rowgate.
    #: Relative to the config file.
    directory: str | None = None
    #: Rubric id → SHA-256 the file must have; a mismatch fails the run before any work.
    pins: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KindScoring:
    """How one record kind is scored against a rubric (DESIGN §3.10).

    Every binding is a polars SQL expression over the kind's columns (a field path such
    as ``ratings.factuality`` is the simplest one); nothing is ever invented, so an
    unbound or null criterion is ``unknown``. See :mod:`pipeline.rubrics.bindings`.
    """

    #: Rubric id, e.g. ``code-review-v1``.
    rubric: str
    #: Criterion id → expression giving its score on the rubric's scale.
    criteria: dict[str, str] = field(default_factory=dict)
    #: Criterion id → boolean expression: false is ``not_applicable``, null ``unknown``.
    applies: dict[str, str] = field(default_factory=dict)
    #: Gate name → ``"builtin"``, ``"not_applicable"``, or an evidence expression.
    gates: dict[str, str] = field(default_factory=dict)
    #: Expression giving the Python source the row proposes (read by the built-in gates).
    code: str | None = None
    #: Top-level modules the code may import (``unapproved_dependencies``).
    allowed_imports: tuple[str, ...] = ()
    #: Whether the running interpreter's standard library counts as approved.
    allow_stdlib: bool = True
    #: The rubric's ``review_policy``: ``"apply"`` it across the kind's rows (default:
    #: reviews of one item counted, voted, collapsed or adjudicated), or only ``"record"``
    #: it in the manifest (an export holding one review per item).
    review_policy: str = "apply"


@dataclass(frozen=True)
class KindPolicy:
    """The decision policy file for one record kind (seed 003 §14)."""

    #: Policy file (TOML), relative to the config file.
    file: str
    #: SHA-256 the policy file must have; a mismatch fails the run before any work.
    sha256: str | None = None


#: a staged row's shard and line: where it was staged, not a value of it
_STAGING_KEYS: Final = frozenset({"_shard", "_shard_line"})


@dataclass(frozen=True)
class DedupeSettings:
    """Exact, normalised and near duplicates and split contamination (DESIGN §3.9)."""

    enabled: bool = True
    #: Same ``_content_sha256`` (the kind's content fingerprint). Nearly free: the gate
    #: computes the fingerprint anyway.
    exact: bool = True
    #: Same kind key (e.g. prompt + unordered pair of responses) after normalisation.
    #: Opt-in: normalising every key text costs ~25 s per 500 MB export on two cores
    #: (measured), ten times the rest of the global phase.
    normalised: bool = False
    #: MinHash + LSH candidates, kept only when the exact Jaccard reaches ``threshold``.
    #: Opt-in for the same reason (~25 s per 500 MB) and because fuzzy removal changes a
    #: dataset's distribution: a campaign should choose its threshold.
    near: bool = False
    #: Normalisation of key text: Unicode NFC, whitespace runs → one space, case folding
    #: (``str.casefold``); NFC and case folding follow this Python's Unicode tables.
    nfc: bool = True
    fold_whitespace: bool = True
    fold_case: bool = True
    #: Jaccard similarity of word-shingle sets at or above which rows are near duplicates.
    threshold: float = bounded(0.8, 0, 1, "a similarity", low_open=True)
    #: Words per shingle.
    shingle_size: int = bounded(
        5, 1, 64, "each word of a shingle costs a pass over every text (2**63-1 hung the run)"
    )
    #: MinHash permutations (signature length).
    permutations: int = bounded(
        128, 1, 1024, "a signature costs 4 bytes per permutation per row, held per partition"
    )
    #: LSH bands; rows per band = permutations // bands. ``None``: the fewest bands that
    #: make a pair at ``threshold`` a candidate with probability ≥ ``target_recall``.
    bands: int | None = bounded(None, 1, 1024, "at most one band per permutation")
    target_recall: float = bounded(
        0.99, 0, 1, "a probability; 1 would need every band", low_open=True, high_open=True
    )
    #: Seed of the MinHash permutations and shingle hashing (fixed: same input, same output).
    seed: int = bounded(1, 0, 2**32 - 1, "the seed of 32-bit hash permutations")
    #: An LSH bucket with more rows than this is compared star-wise: each row only with the
    #: bucket's first ``max_bucket`` rows by survivor rank (bounded work on templated data).
    max_bucket: int = bounded(
        200, 2, 1000, "a bucket of n rows yields up to n x max_bucket candidate pairs per band"
    )
    #: Which row of a duplicate group is kept: ``first``, ``last``, ``max:<column>``,
    #: ``min:<column>`` (a payload column, dotted for struct fields); ties go to the first.
    survivor: str = "first"
    #: Per-kind survivor rules, overriding ``survivor``.
    survivor_by_kind: dict[str, str] = field(default_factory=dict)
    #: Splits whose rows are never removed for appearing in another split; their copies in
    #: other splits are removed as ``dedupe.contamination``.
    protected_splits: tuple[str, ...] = ()
    #: Fields whose values must not straddle splits, per kind (dotted; ``meta.<key>`` reads
    #: the JSON text column); default: the kind's own declaration.
    split_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def validate(self, path: str) -> None:
        check_bounds(self, path)
        if self.bands is not None and self.bands > self.permutations:
            raise ConfigError(f"{path}.bands: must be between 1 and permutations")
        rules = {"survivor": self.survivor} | {
            f"survivor_by_kind.{k}": v for k, v in self.survivor_by_kind.items()
        }
        for name, rule in rules.items():
            if rule not in ("first", "last") and not (
                rule.startswith(("max:", "min:")) and len(rule) > 4
            ):
                raise ConfigError(
                    f"{path}.{name}: {rule!r} is not first, last, max:<column> or min:<column>"
                )
        named = [(f"{path}.{n}", r.partition(":")[2]) for n, r in rules.items()]
        named += [
            (f"{path}.split_groups.{k}", f) for k, fs in self.split_groups.items() for f in fs
        ]
        for name, column in named:
            if column.split(".")[0] in _STAGING_KEYS:
                raise ConfigError(
                    f"{name}: {column!r} is where the run staged a row, which depends on how "
                    "the inputs were cut into shards: name a column of the records (or "
                    "first, last)"
                )
        if len(set(self.protected_splits)) != len(self.protected_splits):
            raise ConfigError(f"{path}.protected_splits: a split is listed twice")

    def survivor_rule(self, kind: str) -> str:
        return self.survivor_by_kind.get(kind, self.survivor)


@dataclass(frozen=True)
class SanitizeSettings:
    """PII and credential redaction in the gate (seed 002); off unless enabled."""

    enabled: bool = False
    #: Policy file (TOML, see pipeline.sanitize.policy); a relative path is resolved
    #: against the config file when it is loaded. Default: rowgate's built-in policy.
    policy: str | None = None
    #: SHA-256 the policy file must have; a mismatch fails the run before any work.
    policy_sha256: str | None = None

    def validate(self, path: str) -> None:
        check_bounds(self, path)
        pin = self.policy_sha256
        if pin is not None and (len(pin) != 64 or any(c not in "0123456789abcdef" for c in pin)):
            raise ConfigError(f"{path}.policy_sha256: expected 64 lower-case hex digits")


_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class LineageSettings:
    """Keyed lineage (seed 002: redacted values must not be recoverable from lineage).

    With a key, ``_raw_sha256`` and ``_content_sha256`` are HMAC-SHA-256 under it instead
    of SHA-256 (:class:`pipeline.records.lineage.LineageDigest`). The config names where
    the key is, never the key: the manifest records the mode and a key id only, and
    ``rowgate verify`` needs the same key from the same place.
    """

    #: Environment variable holding the key (at least 32 bytes, e.g. 64 hex digits).
    key_env: str | None = None
    #: File holding the key (surrounding whitespace ignored); relative to the config file.
    key_file: str | None = None

    def validate(self, path: str) -> None:
        check_bounds(self, path)
        if self.key_env is not None and self.key_file is not None:
            raise ConfigError(f"{path}: give key_env or key_file, not both")
        if self.key_env is not None and not _ENV_NAME.fullmatch(self.key_env):
            raise ConfigError(
                f"{path}.key_env: {self.key_env!r} is not an environment variable name"
            )
        if self.key_file is not None and not self.key_file.strip():
            raise ConfigError(f"{path}.key_file: must not be empty")

    @property
    def keyed(self) -> bool:
        return self.key_env is not None or self.key_file is not None


@dataclass(frozen=True)
class CampaignConfig:
    """Everything a run needs to know, from a TOML file, flags, or defaults."""

    name: str = "default"
    inputs: tuple[InputSpec, ...] = ()
    limits: Limits = Limits()
    engine: EngineSettings = EngineSettings()
    output: OutputSettings = OutputSettings()
    schemas: SchemaSettings = SchemaSettings()
    references: References = References()
    rules: RuleSettings = RuleSettings()
    rubrics: RubricSettings = RubricSettings()
    #: Record kind → rubric bindings; a kind without an entry is not scored.
    scoring: dict[str, KindScoring] = field(default_factory=dict)
    #: Record kind → decision policy; a kind without an entry gets no decision.
    policy: dict[str, KindPolicy] = field(default_factory=dict)
    dedupe: DedupeSettings = DedupeSettings()
    sanitize: SanitizeSettings = SanitizeSettings()
    lineage: LineageSettings = LineageSettings()
    run: RunSettings = RunSettings()
    #: Directory relative input paths are resolved against (the config file's).
    base_dir: str = "."
    #: SHA-256 of the config file's bytes, when there is one.
    source_sha256: str | None = None
    #: The config file (absolute), when there is one: ``rowgate verify`` re-hashes it.
    source_path: str | None = None

    def validate(self) -> CampaignConfig:
        """Check every section (each its settings' :class:`Bounds`, then the rest) and
        what spans sections; return ``self``."""
        self.limits.validate("limits")
        self.engine.validate("engine")
        self.output.validate("output")
        self.rules.validate("rules")
        self.dedupe.validate("dedupe")
        self.sanitize.validate("sanitize")
        self.lineage.validate("lineage")
        self.run.validate("run")
        seen = set()
        for i, spec in enumerate(self.inputs):
            if not spec.path:
                # Path("") is ".": it read every JSONL file in the config's directory
                raise ConfigError(f"inputs[{i}].path: must not be empty")
            if spec.path in seen:
                raise ConfigError(f"inputs[{i}].path: {spec.path!r} is listed twice")
            seen.add(spec.path)
            if spec.split is not None and not spec.split.strip():
                raise ConfigError(f"inputs[{i}].split: must not be empty")
        for kind, scoring in self.scoring.items():
            if scoring.review_policy not in REVIEW_POLICY_MODES:
                raise ConfigError(
                    f"scoring.{kind}.review_policy: {scoring.review_policy!r} is not one of "
                    + ", ".join(REVIEW_POLICY_MODES)
                )
        pins = [(f"rubrics.pins.{k}", v) for k, v in self.rubrics.pins.items()]
        pins += [(f"policy.{k}.sha256", p.sha256) for k, p in self.policy.items() if p.sha256]
        for path, digest in pins:
            if not _SHA256.fullmatch(digest):
                raise ConfigError(f"{path}: expected a SHA-256 (64 lowercase hex digits)")
        labelled = {spec.split for spec in self.inputs}
        for split in self.dedupe.protected_splits:
            if self.inputs and split not in labelled:
                raise ConfigError(
                    f"dedupe.protected_splits: no input is labelled with split {split!r}"
                )
        return self

    def override(self, **changes: Any) -> CampaignConfig:
        """A copy with dotted keys replaced, e.g. ``override(**{"engine.workers": 2})``."""
        config: Any = self
        for dotted, value in changes.items():
            config = _replace(config, dotted.split("."), value, dotted)
        return typing.cast(CampaignConfig, config).validate()

    def resolve(self, spec: InputSpec) -> Path:
        return self.resolve_path(spec.path)

    def resolve_path(self, given: str) -> Path:
        """A path from the config, relative to the config file's directory."""
        path = Path(given)
        return path if path.is_absolute() else Path(self.base_dir) / path

    def as_dict(self) -> dict[str, Any]:
        """The effective config, for the manifest.

        ``lineage`` appears only when a key is configured, and a setting added after the
        manifest's layout was fixed (a reference table, ``engine.partitions``) only when it
        is set: the config (and so the digest and manifest) of a run that uses none of
        them reads as it did before they existed."""
        found = dataclasses.asdict(self)
        if not self.lineage.keyed:
            del found["lineage"]
        for section in dataclasses.fields(self):
            value = getattr(self, section.name)
            if section.name not in found or not dataclasses.is_dataclass(value):
                continue
            for f in dataclasses.fields(value):
                if f.metadata.get("listed_when_set") and getattr(value, f.name) is None:
                    del found[section.name][f.name]
        return found


def _replace(obj: Any, keys: list[str], value: Any, dotted: str) -> Any:
    names = {f.name for f in dataclasses.fields(obj)}
    if keys[0] not in names:
        raise ConfigError(f"{dotted}: unknown setting")
    if len(keys) == 1:
        return dataclasses.replace(obj, **{keys[0]: value})
    inner = _replace(getattr(obj, keys[0]), keys[1:], value, dotted)
    return dataclasses.replace(obj, **{keys[0]: inner})


T = TypeVar("T")

#: Fields set from where the config came from, never written in a TOML file.
_NOT_IN_TOML: Final = ("base_dir", "source_sha256", "source_path")


def _build(cls: type[T], table: Any, path: str) -> T:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: expected a table")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.name not in _NOT_IN_TOML}  # type: ignore[arg-type]
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(
            f"{path + '.' if path else ''}{unknown[0]}: unknown key{did_you_mean(unknown[0], known)}"
        )
    missing = [
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.name in known
        and f.name not in table
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(
            f"{path + ': ' if path else ''}missing required key"
            f"{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
        )
    values = {
        name: _coerce(hints[name], value, f"{path}.{name}" if path else name)
        for name, value in table.items()
    }
    try:
        return cls(**values)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{path or 'config'}: {exc}") from None


def did_you_mean(name: Any, known: Iterable[str], n: int = 1) -> str:
    """``; did you mean 'max_line_bytes'?`` for the closest known names, if any is close."""
    close = difflib.get_close_matches(str(name), sorted(known), n=n)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""


def _coerce(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None and len(options) < len(typing.get_args(hint)):
            return None  # TOML has no null: only a recorded config (as_dict) holds one
        return _coerce(options[0], value, path)
    if dataclasses.is_dataclass(hint):
        return _build(typing.cast(type, hint), value, path)
    if origin is tuple:
        (item,) = {a for a in typing.get_args(hint) if a is not Ellipsis}
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected an array")
        return tuple(_coerce(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        _, item = typing.get_args(hint)
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a table")
        return {k: _coerce(item, v, f"{path}.{k}") for k, v in value.items()}
    expected = hint
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ConfigError(f"{path}: expected {expected.__name__}, got {type(value).__name__}")
    return value


def build_section(cls: type[T], table: Any, path: str) -> T:
    """Build a frozen dataclass from a parsed TOML table with this module's strict rules
    (unknown keys, wrong types and values outside their :class:`Bounds` are errors naming
    their path). Other files in the config's family, such as decision policies, are read
    with it."""
    section = _build(cls, table, path)
    check_bounds(section, path)
    return section


def parse_toml(data: bytes, where: str) -> dict[str, Any]:
    """A TOML document of the config's family, or :class:`ConfigError` naming ``where``.

    tomllib converts integers with ``int()``: one of 4301 digits or more raised Python's
    int-conversion limit (a ``ValueError`` that is not a ``TOMLDecodeError``) as a
    traceback."""
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    except ValueError:
        raise ConfigError(
            f"{where}: not valid TOML: an integer has more than 4300 digits"
        ) from None


def load_campaign(path: str | Path) -> CampaignConfig:
    """Load and validate a campaign TOML file."""
    path = Path(path)
    data = read_regular(path, f"cannot read config {path}", error=ConfigError)
    config = _build(CampaignConfig, parse_toml(data, str(path)), "")
    base_dir = path.resolve().parent
    return dataclasses.replace(
        _anchored(config, base_dir),
        base_dir=str(base_dir),
        source_sha256=hashlib.sha256(data).hexdigest(),
        source_path=str(path.resolve()),
    ).validate()


def recorded_config(recorded: dict[str, Any]) -> CampaignConfig:
    """The config a manifest records (:meth:`CampaignConfig.as_dict`), rebuilt:
    ``rowgate verify`` derives from it what the run derived from its config (the columns
    the global stages declare). Its paths were anchored when the run loaded it."""
    table = {k: v for k, v in recorded.items() if k not in _NOT_IN_TOML}
    where = {k: recorded[k] for k in _NOT_IN_TOML if k in recorded}
    return dataclasses.replace(_build(CampaignConfig, table, "config"), **where).validate()


def _anchored(config: CampaignConfig, base_dir: Path) -> CampaignConfig:
    """``config`` with every path it names, other than the inputs, made absolute against
    the config file's directory.

    Every config path resolves against ``base_dir`` (:meth:`CampaignConfig.resolve_path`).
    Anchoring them at load matters because a command line that replaces the inputs also
    resets ``base_dir`` to the working directory (its paths are the caller's): that must
    not move the schemas, rubrics, policies, reference tables or sanitize policy the file
    names.
    """

    def anchor(given: str) -> str:
        return given if Path(given).is_absolute() else os.path.normpath(base_dir / given)

    def table(found: ReferenceTable | None) -> ReferenceTable | None:
        return None if found is None else dataclasses.replace(found, path=anchor(found.path))

    references, schemas = config.references, config.schemas
    rubrics, sanitize, lineage = config.rubrics, config.sanitize, config.lineage
    return dataclasses.replace(
        config,
        schemas=dataclasses.replace(
            schemas, directory=schemas.directory and anchor(schemas.directory)
        ),
        rubrics=dataclasses.replace(
            rubrics, directory=rubrics.directory and anchor(rubrics.directory)
        ),
        references=dataclasses.replace(
            references,
            documents=table(references.documents),
            authorised_documents=table(references.authorised_documents),
            contracts=table(references.contracts),
        ),
        policy={k: dataclasses.replace(p, file=anchor(p.file)) for k, p in config.policy.items()},
        sanitize=dataclasses.replace(sanitize, policy=sanitize.policy and anchor(sanitize.policy)),
        lineage=dataclasses.replace(
            # a blank name stays blank, for validate() to refuse
            lineage,
            key_file=lineage.key_file and lineage.key_file.strip() and anchor(lineage.key_file),
        ),
    )
