"""The campaign config: one TOML file → one typed, validated object (DESIGN §3.13).

Every capability reads its settings from :class:`CampaignConfig`; CLI flags override
single values through :meth:`CampaignConfig.override`. Unknown keys are errors that name
their path, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar, Union

__all__ = [
    "CampaignConfig",
    "ConfigError",
    "EngineSettings",
    "InputSpec",
    "Limits",
    "OutputSettings",
    "SanitizeSettings",
    "load_campaign",
]

MiB: Final = 1 << 20


class ConfigError(ValueError):
    """An invalid campaign config or flag, with the path of the offending key."""


@dataclass(frozen=True)
class Limits:
    """Bounds checked before and during parsing (DESIGN §3.2)."""

    #: Longest line accepted, in bytes; longer lines are rejected unparsed (line.too_large).
    max_line_bytes: int = 8 * MiB
    #: Deepest nesting accepted; ``{}`` has depth 1 (json.too_deep).
    max_depth: int = 64
    #: Most members of one object or elements of one array (json.too_many_items).
    max_items: int = 10_000

    def validate(self, path: str) -> None:
        for name in ("max_line_bytes", "max_depth", "max_items"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{path}.{name}: must be at least 1")


@dataclass(frozen=True)
class InputSpec:
    """One input file: its path as given, and optionally its declared kind and split."""

    path: str
    kind: str | None = None
    split: str | None = None


@dataclass(frozen=True)
class EngineSettings:
    name: str = "local"
    #: Worker processes; ``None`` means one per available core.
    workers: int | None = None
    #: Plain files are cut into shards of about this many bytes, on line boundaries.
    #: Shards, not workers, fix the output files, so output is worker-count independent.
    shard_bytes: int = 64 * MiB
    #: Lines gated and converted to Arrow at a time inside a worker.
    batch_lines: int = 4096

    def validate(self, path: str) -> None:
        if self.name not in ("local",):
            raise ConfigError(f"{path}.name: unknown engine {self.name!r} (known: local)")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"{path}.workers: must be at least 1")
        if self.shard_bytes < 4096:
            raise ConfigError(f"{path}.shard_bytes: must be at least 4096")
        if self.batch_lines < 1:
            raise ConfigError(f"{path}.batch_lines: must be at least 1")

    def resolved_workers(self) -> int:
        if self.workers is not None:
            return self.workers
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # pragma: no cover - not Linux
            return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class OutputSettings:
    compression: str = "zstd"
    compression_level: int | None = None

    def validate(self, path: str) -> None:
        if self.compression not in ("zstd", "snappy", "gzip", "lz4", "none"):
            raise ConfigError(f"{path}.compression: unknown codec {self.compression!r}")


@dataclass(frozen=True)
class SchemaSettings:
    #: Where the schemas live; default: the ``schemas/`` directory shipped with rowgate.
    directory: str | None = None
    #: Schema id → SHA-256 the file must have; a mismatch fails the run.
    pins: dict[str, str] = field(default_factory=dict)


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
        pin = self.policy_sha256
        if pin is not None and (len(pin) != 64 or any(c not in "0123456789abcdef" for c in pin)):
            raise ConfigError(f"{path}.policy_sha256: expected 64 lower-case hex digits")


@dataclass(frozen=True)
class CampaignConfig:
    """Everything a run needs to know, from a TOML file, flags, or defaults."""

    name: str = "default"
    inputs: tuple[InputSpec, ...] = ()
    limits: Limits = Limits()
    engine: EngineSettings = EngineSettings()
    output: OutputSettings = OutputSettings()
    schemas: SchemaSettings = SchemaSettings()
    sanitize: SanitizeSettings = SanitizeSettings()
    #: Directory relative input paths are resolved against (the config file's).
    base_dir: str = "."
    #: SHA-256 of the config file's bytes, when there is one.
    source_sha256: str | None = None

    def validate(self) -> CampaignConfig:
        self.limits.validate("limits")
        self.engine.validate("engine")
        self.output.validate("output")
        self.sanitize.validate("sanitize")
        seen = set()
        for i, spec in enumerate(self.inputs):
            if spec.path in seen:
                raise ConfigError(f"inputs[{i}].path: {spec.path!r} is listed twice")
            seen.add(spec.path)
        return self

    def override(self, **changes: Any) -> CampaignConfig:
        """A copy with dotted keys replaced, e.g. ``override(**{"engine.workers": 2})``."""
        config: Any = self
        for dotted, value in changes.items():
            config = _replace(config, dotted.split("."), value, dotted)
        return typing.cast(CampaignConfig, config).validate()

    def resolve(self, spec: InputSpec) -> Path:
        path = Path(spec.path)
        return path if path.is_absolute() else Path(self.base_dir) / path

    def as_dict(self) -> dict[str, Any]:
        """The effective config, for the manifest."""
        return dataclasses.asdict(self)


def _replace(obj: Any, keys: list[str], value: Any, dotted: str) -> Any:
    names = {f.name for f in dataclasses.fields(obj)}
    if keys[0] not in names:
        raise ConfigError(f"{dotted}: unknown setting")
    if len(keys) == 1:
        return dataclasses.replace(obj, **{keys[0]: value})
    inner = _replace(getattr(obj, keys[0]), keys[1:], value, dotted)
    return dataclasses.replace(obj, **{keys[0]: inner})


T = TypeVar("T")


def _build(cls: type[T], table: Any, path: str) -> T:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: expected a table")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.name not in ("base_dir", "source_sha256")}  # type: ignore[arg-type]
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{path + '.' if path else ''}{unknown[0]}: unknown key")
    values = {
        name: _coerce(hints[name], value, f"{path}.{name}" if path else name)
        for name, value in table.items()
    }
    try:
        return cls(**values)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{path or 'config'}: {exc}") from None


def _coerce(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
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


def load_campaign(path: str | Path) -> CampaignConfig:
    """Load and validate a campaign TOML file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    config = _build(CampaignConfig, table, "")
    base_dir = path.resolve().parent
    policy = config.sanitize.policy
    if policy is not None and not Path(policy).is_absolute():
        # Resolved now: a command line that replaces the inputs also resets base_dir.
        config = dataclasses.replace(
            config, sanitize=dataclasses.replace(config.sanitize, policy=str(base_dir / policy))
        )
    return dataclasses.replace(
        config,
        base_dir=str(base_dir),
        source_sha256=hashlib.sha256(data).hexdigest(),
    ).validate()
