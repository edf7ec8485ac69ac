"""The record-kind plug-in interface, its registry, and routing (DESIGN §3.1)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

from pipeline.core.config import ConfigError, did_you_mean
from pipeline.core.errors import EXIT_INPUT, RowgateError
from pipeline.core.reasons import SCHEMA_UNSUPPORTED_VERSION, RejectLine

if TYPE_CHECKING:  # polars stays out of the gate workers, which import every kind
    from pipeline.dedupe.keys import DedupeKey
    from pipeline.records.lineage import ContentFingerprint

__all__ = [
    "KINDS",
    "VERSION_FIELDS",
    "RecordKind",
    "check_kind_names",
    "get_kind",
    "register_kind",
    "route",
]

#: Fields a record may use to name its own version, in the order routing consults them
#: (``schemaVersion``: the AutoQA evaluation contract's camel-case documents).
VERSION_FIELDS: Final = ("schema_version", "schema", "version", "schemaVersion")


class UnknownKindError(RowgateError, KeyError):
    """A kind name that no registered plug-in answers to."""

    exit_code: ClassVar[int] = EXIT_INPUT

    def __str__(self) -> str:
        return f"unknown record kind {self.args[0]!r}; known kinds: {', '.join(sorted(KINDS))}"


def check_kind_names(names: Iterable[str], path: str, also: Sequence[str] = ()) -> None:
    """Refuse a config table keyed by record kind (``path``) whose key names none (nor
    one of ``also``): its setting would apply to no row, silently
    (``dedupe.survivor_by_kind`` with ``math-reasoning`` kept the first row where
    ``max:`` was meant)."""
    known = [*sorted(KINDS), *also]
    for name in names:
        if name not in known:
            raise ConfigError(
                f"{path}.{name}: unknown record kind{did_you_mean(name, known)} "
                f"(known: {', '.join(known)})"
            )


class RecordKind:
    """One record kind and version. Subclass, set the class attributes, register.

    ``version_field``/``version_value`` name the record's own version marker when the
    kind has one; kinds without one are only reachable through a declared ``--kind``.
    """

    id: ClassVar[str]
    version_field: ClassVar[str | None] = None
    version_value: ClassVar[str | None] = None
    #: fields naming one logical submission: the first row of a key is the original; a
    #: later row with the same body is its retry (a duplicate), with another body an
    #: idempotency conflict (cross-record rules)
    idempotency_key: ClassVar[tuple[str, ...]] = ("task_id",)
    #: top-level fields stored apart from the training features, renamed (e.g. ``_meta``)
    apart: ClassVar[dict[str, str]] = {}

    @property
    def schema_id(self) -> str:
        return self.id

    def content(self, record: dict[str, Any]) -> tuple[ContentFingerprint, Sequence[str]]:
        """The content-hash profile for ``record`` and the fields it commits to, in order
        (a kind may choose among profiles per record, e.g. single- or multi-turn)."""
        raise NotImplementedError

    def fingerprint(self, record: dict[str, Any]) -> str:
        """``_content_sha256``: SHA-256 over the kind's declared content fields."""
        return self.fingerprint_and_profile(record)[0]

    def fingerprint_and_profile(
        self, record: dict[str, Any], key: bytes | None = None
    ) -> tuple[str, str]:
        """``_content_sha256`` and ``_content_profile`` (the profile's name) of ``record``;
        the digest is HMAC-SHA-256 under ``key`` in keyed lineage mode."""
        profile, fields = self.content(record)
        return profile.digest(fields, key), profile.profile

    def dedupe_key(self) -> DedupeKey | None:
        """What makes two rows of this kind the same item beyond their content
        fingerprint (normalised and near duplicates); ``None``: exact duplicates only."""
        return None

    def review_subject(self) -> DedupeKey | None:
        """The item a row reviews, compared exactly (by its SHA-256, as content
        fingerprints are): rows with equal subjects are reviews of one item, counted and
        voted by a rubric's review policy (:mod:`pipeline.decide.stages.review`).
        ``None``: a row is no review of a shared item."""
        return None


KINDS: dict[str, RecordKind] = {}
_BY_VERSION: dict[tuple[str, str], RecordKind] = {}

K = TypeVar("K", bound=type[RecordKind])


def register_kind(cls: K) -> K:
    """Class decorator: make a :class:`RecordKind` available by its ``id``."""
    kind = cls()
    if kind.id in KINDS:
        raise ValueError(f"record kind {kind.id!r} registered twice")
    if (kind.version_field is None) != (kind.version_value is None):
        raise ValueError(f"{kind.id}: version_field and version_value go together")
    if kind.version_field is not None:
        if kind.version_field not in VERSION_FIELDS:
            raise ValueError(f"{kind.id}: version field must be one of {VERSION_FIELDS}")
        assert kind.version_value is not None
        _BY_VERSION[(kind.version_field, kind.version_value)] = kind
    KINDS[kind.id] = kind
    return cls


def get_kind(kind_id: str) -> RecordKind:
    try:
        return KINDS[kind_id]
    except KeyError:
        raise UnknownKindError(kind_id) from None


def route(record: dict[str, Any], declared: str | None) -> RecordKind:
    """Pick the kind for a parsed record, or reject it (``schema.unsupported_version``).

    A declared kind is authoritative; a record that names a different version of it is
    rejected rather than re-routed. Without a declared kind the record's own version
    field decides. Nothing is ever guessed from a record's shape.
    """
    if declared is not None:
        kind = get_kind(declared)
        field = kind.version_field
        if field is not None and field in record and record[field] != kind.version_value:
            raise RejectLine(
                SCHEMA_UNSUPPORTED_VERSION,
                f"the input is declared {kind.id} but the record's {field} names another version",
                f"$.{field}",
            )
        return kind
    for field in VERSION_FIELDS:
        if field in record:
            value = record[field]
            found = _BY_VERSION.get((field, value)) if isinstance(value, str) else None
            if found is None:
                raise RejectLine(
                    SCHEMA_UNSUPPORTED_VERSION,
                    f"{field} does not name a supported version",
                    f"$.{field}",
                )
            return found
    raise RejectLine(
        SCHEMA_UNSUPPORTED_VERSION,
        "the record has no version field and its input declares no kind",
    )
