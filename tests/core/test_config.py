"""The campaign config: strict TOML loading, paths, overrides."""

from __future__ import annotations

import dataclasses
import io
import math
import re
import typing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.config import CODEC_LEVELS, Bounds, CampaignConfig, ConfigError, load_campaign
from tests.conftest import DATA


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    return path


def test_sample_campaign_loads() -> None:
    config = load_campaign(DATA / "campaign.toml")
    assert config.name == "samples"
    assert {s.kind for s in config.inputs} == {
        "pairwise-v2",
        "agent-trace-v1",
        "grounded-qa-v1",
        "math-reasoning-v1",
        "pw-decide-row-1",
        None,  # ARI envelopes route by their own version fields
    }
    assert config.resolve(config.inputs[0]) == DATA / "pairwise-v2.jsonl"
    assert config.source_sha256 is not None
    assert len(config.source_sha256) == 64


@pytest.mark.parametrize(
    "address", ["auto", "local", "10.0.0.1:6379", "ray://head.example:10001", "[::1]:6379"]
)
def test_ray_addresses_ray_can_join_are_taken(address: str) -> None:
    assert CampaignConfig().override(**{"engine.address": address}).engine.address == address


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nmae = 'x'", "nmae: unknown key"),
        ("[limits]\nmax_depht = 3", "limits.max_depht: unknown key"),
        ("[limits]\nmax_depth = 'deep'", "limits.max_depth: expected int, got str"),
        ("[limits]\nmax_depth = true", "limits.max_depth: expected int, got bool"),
        ("[limits]\nmax_depth = 0", "limits.max_depth: must be in [1, 254] (got 0)"),
        ("[limits]\nmax_depth = 255", "limits.max_depth: must be in [1, 254] (got 255)"),
        (
            "[limits]\nmax_line_bytes = 2147483648",
            "limits.max_line_bytes: must be in [1, 1073741824]",
        ),
        ("[engine]\nbatch_bytes = 0", "engine.batch_bytes: must be in [1, 1073741824]"),
        # hung the run in the dedupe stage; accepted, then ignored by Arrow
        ("[dedupe]\nshingle_size = 9223372036854775807", "dedupe.shingle_size: must be in [1, 64]"),
        ("[output]\ncompression_level = 1000", "output.compression_level: must be in [1, 22]"),
        ("[output]\ncompression = 'gzip'\ncompression_level = 10", "must be in [1, 9] for gzip"),
        ("[output]\ncompression = 'snappy'\ncompression_level = 1", "takes no compression level"),
        ("[engine]\nworkers = 257", "engine.workers: must be in [1, 256]"),
        # Ray exited 4 on these, or retried for minutes on a port that cannot be
        ("[engine]\naddress = 'not a host'", "engine.address: not a Ray address: 'not a host'"),
        ("[engine]\naddress = '127.0.0.1:0'", "engine.address: not a Ray address"),
        ("[engine]\naddress = '127.0.0.1:99999'", "engine.address: not a Ray address"),
        ("[engine]\naddress = 'ray://head:port'", "engine.address: not a Ray address"),
        ("[dedupe]\nthreshold = nan", "dedupe.threshold: must be in (0, 1]"),
        # Path("") is "." : it read every JSONL file in the config's directory
        ("[[inputs]]\npath = ''", "inputs[0].path: must not be empty"),
        ("[[inputs]]\nkind = 'pairwise-v2'", "inputs[0]"),
        ("[[inputs]]\npath = 'a'\n[[inputs]]\npath = 'a'", "inputs[1].path: 'a' is listed twice"),
        ("[output]\ncompression = 'brotli2'", "output.compression: unknown codec"),
        ("[schemas.pins]\npairwise-v2 = 3", "schemas.pins.pairwise-v2: expected str"),
        ("this is not toml", "not valid TOML"),
        # tomllib's int() raised Python's int-conversion limit as a traceback
        ("[limits]\nmax_depth = " + "9" * 4301, "not valid TOML: an integer has more than 4300"),
        ("[lineage]\nkey = 'secret'", "lineage.key: unknown key"),
        ("[lineage]\nkey_env = 'K'\nkey_file = 'k'", "lineage: give key_env or key_file, not both"),
        ("[lineage]\nkey_env = 'MY-KEY'", "lineage.key_env: 'MY-KEY' is not an environment"),
        ("[lineage]\nkey_env = 3", "lineage.key_env: expected str, got int"),
        ("[lineage]\nkey_file = ' '", "lineage.key_file: must not be empty"),
    ],
)
def test_invalid_configs_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_campaign(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[inputs]]\nkind = 'pairwise-v2'", "inputs[0]: missing required key 'path'"),
        (
            "[references.documents]\nsha256 = 'ab'",
            "references.documents: missing required key 'path'",
        ),
        ("[policy.pairwise-v2]\nsha256 = 'ab'", "policy.pairwise-v2: missing required key 'file'"),
        ("[scoring.pairwise-v2]\ncode = 'x'", "scoring.pairwise-v2: missing required key 'rubric'"),
    ],
)
def test_a_missing_required_key_is_named_not_a_python_signature(
    tmp_path: Path, text: str, message: str
) -> None:
    """The error used to read ``InputSpec.__init__() missing 1 required positional
    argument: 'path'``: Python's words for rowgate's class, not the config's."""
    with pytest.raises(ConfigError) as raised:
        load_campaign(_write(tmp_path, text))
    assert str(raised.value) == message


def test_a_policy_file_missing_required_keys_names_them(tmp_path: Path) -> None:
    from pipeline.rubrics.decision_policy import load_policy
    from pipeline.rubrics.model import RubricError

    empty = tmp_path / "policy.toml"
    empty.write_text("description = 'no rules yet'\n")
    with pytest.raises(RubricError) as raised:
        load_policy(empty)
    assert str(raised.value) == (
        f"{empty}: missing required keys 'policy', 'version', 'target', 'rules'"
    )


def test_overrides_are_validated() -> None:
    config = CampaignConfig().override(**{"engine.workers": 3, "limits.max_depth": 10})
    assert config.engine.workers == 3
    assert config.limits.max_depth == 10
    with pytest.raises(ConfigError, match=r"engine\.wrokers: unknown setting"):
        CampaignConfig().override(**{"engine.wrokers": 3})
    with pytest.raises(ConfigError, match=r"engine\.workers: must be in \[1, 256\] \(got 0\)"):
        CampaignConfig().override(**{"engine.workers": 0})


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_campaign(tmp_path / "absent.toml")


def test_the_documented_campaign_example_loads(tmp_path: Path) -> None:
    """The config page's example must stay a valid config (digests stand in for the "…")."""
    import re

    page = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text("utf-8")
    section = page[page.index("## A complete example") :]
    match = re.search(r"```toml\n(.*?)```", section, re.S)
    assert match is not None
    path = _write(tmp_path, match.group(1).replace('"…"', '"' + "0" * 64 + '"'))
    config = load_campaign(path)
    assert config.inputs[0].kind == "pairwise-v2"
    assert config.sanitize.enabled


def test_config_paths_are_anchored_to_the_config_file(tmp_path: Path) -> None:
    """Every path a config file names (other than inputs) is made absolute against the
    file's directory at load, so replacing the inputs and base_dir cannot move it."""
    folder = tmp_path / "campaign"
    folder.mkdir()
    path = folder / "c.toml"
    path.write_text(
        '[schemas]\ndirectory = "s"\n[rubrics]\ndirectory = "r"\n'
        '[references.documents]\npath = "docs/d.jsonl"\n'
        '[references.authorised_documents]\npath = "/abs/a.jsonl"\n'
        '[policy."pairwise-v2"]\nfile = "../p.toml"\n'
        '[sanitize]\npolicy = "sp.toml"\n'
    )
    config = load_campaign(path)
    assert config.schemas.directory == str(folder / "s")
    assert config.rubrics.directory == str(folder / "r")
    assert config.references.documents is not None
    assert config.references.documents.path == str(folder / "docs" / "d.jsonl")
    assert config.references.authorised_documents is not None
    assert config.references.authorised_documents.path == "/abs/a.jsonl"
    assert config.policy["pairwise-v2"].file == str(tmp_path / "p.toml")  # normalised
    assert config.sanitize.policy == str(folder / "sp.toml")
    moved = dataclasses.replace(config, base_dir="/elsewhere")
    assert moved.resolve_path(moved.schemas.directory or "") == folder / "s"


def _numeric_settings() -> list[tuple[str, type, dataclasses.Field[Any], type, bool]]:
    """(dotted key, section, field, int or float, optional) of every int or float setting reachable
    from CampaignConfig, found by walking its type hints: a setting added later is
    found too. A number inside a container (``dict[str, int]``) is reported with the
    container's field, which then fails for having no Bounds."""
    found: list[tuple[str, type, dataclasses.Field[Any], type, bool]] = []

    def leaves(hint: Any) -> list[Any]:
        args = typing.get_args(hint)
        return [hint] if not args else [leaf for arg in args for leaf in leaves(arg)]

    def walk(section: type, path: str) -> None:
        hints = typing.get_type_hints(section)
        for f in dataclasses.fields(section):
            if f.name in ("base_dir", "source_sha256"):
                continue  # set by the loader, not settings
            key = f"{path}.{f.name}" if path else f.name
            kinds = leaves(hints[f.name])
            for kind in kinds:
                if dataclasses.is_dataclass(kind):
                    walk(typing.cast(type, kind), key)
            numbers = [kind for kind in kinds if kind in (int, float)]
            if numbers:
                found.append((key, section, f, numbers[0], type(None) in kinds))

    walk(CampaignConfig, "")
    return found


def _outside(bounds: Bounds, kind: type) -> list[float]:
    """Values just outside each end of ``bounds``."""
    if kind is int:
        return [bounds.low - 1, bounds.high + 1]
    low = bounds.low if bounds.low_open else math.nextafter(bounds.low, -math.inf)
    high = bounds.high if bounds.high_open else math.nextafter(bounds.high, math.inf)
    return [low, high]


def _inside(bounds: Bounds, kind: type) -> list[float]:
    """The values at each end of ``bounds`` (just inside an open end)."""
    if kind is int:
        return [bounds.low, bounds.high]
    low = math.nextafter(bounds.low, math.inf) if bounds.low_open else bounds.low
    high = math.nextafter(bounds.high, -math.inf) if bounds.high_open else bounds.high
    return [low, high]


def _setting(config: CampaignConfig, key: str) -> Any:
    value: Any = config
    for name in key.split("."):
        value = getattr(value, name)
    return value


#: Settings whose far end needs another setting moved with it (a cross-setting check).
_COMPANIONS: dict[str, dict[str, Any]] = {"dedupe.bands": {"dedupe.permutations": 1024}}


def test_every_numeric_setting_is_bounded(tmp_path: Path) -> None:
    """Every numeric setting has a documented lower and upper bound (a new one without
    them fails here), checked on load and on override with the key's path in the
    error; both ends are valid values. Unbounded settings hung the run
    (``dedupe.shingle_size = 2**63-1``) or were accepted and ignored
    (``output.compression_level = 1000``)."""
    settings = _numeric_settings()
    keys = {key for key, *_ in settings}
    assert {"limits.max_decompressed_bytes", "dedupe.shingle_size", "engine.workers"} <= keys
    for key, section, f, kind, optional in settings:
        bounds = f.metadata.get("bounds")
        assert isinstance(bounds, Bounds), f"{key}: a numeric setting needs bounded(...)"
        assert bounds.why, key
        table, name = key.rsplit(".", 1)
        companions = _COMPANIONS.get(key, {})
        for value in _inside(bounds, kind):
            changes = {**companions, key: kind(value)}
            assert _setting(CampaignConfig().override(**changes), key) == value
            if not optional:
                extra = "".join(f"{k.rsplit('.', 1)[1]} = {v!r}\n" for k, v in companions.items())
                text = f"[{table}]\n{extra}{name} = {kind(value)!r}\n"
                loaded = load_campaign(_write(tmp_path, text))
                assert _setting(loaded, key) == value, text
        for value in _outside(bounds, kind):
            message = re.escape(f"{key}: must be in {bounds} (got {kind(value)!r})")
            with pytest.raises(ConfigError, match=message):
                CampaignConfig().override(**{key: kind(value)})
            if not optional:
                with pytest.raises(ConfigError, match=message):
                    load_campaign(_write(tmp_path, f"[{table}]\n{name} = {kind(value)!r}\n"))
            validate = getattr(section, "validate", None)
            if validate is not None:  # a section also validated alone (rowgate dedupe)
                with pytest.raises(ConfigError, match=message):
                    validate(section(**{name: kind(value)}), table)


@pytest.mark.parametrize("codec", sorted(CODEC_LEVELS))
def test_compression_levels_are_those_the_codec_writes(codec: str) -> None:
    """Each codec's documented levels all write a Parquet file; outside them is an
    error at load, not after the gate (Arrow took zstd 1000 silently, and failed on
    gzip 10 when the first file was written)."""
    levels = CODEC_LEVELS[codec]
    if levels is None:
        with pytest.raises(ConfigError, match="takes no compression level"):
            CampaignConfig().override(
                **{"output.compression": codec, "output.compression_level": 1}
            )
        return
    for level in levels:
        config = CampaignConfig().override(
            **{"output.compression": codec, "output.compression_level": level}
        )
        pq.write_table(
            pa.table({"a": [1, 2]}),
            io.BytesIO(),
            compression=codec,
            compression_level=config.output.compression_level,
        )
    for level in (levels[0] - 1, levels[1] + 1):
        with pytest.raises(ConfigError, match=r"output\.compression_level: must be in"):
            CampaignConfig().override(
                **{"output.compression": codec, "output.compression_level": level}
            )


def test_lineage_key_settings_name_where_the_key_is_never_the_key(tmp_path: Path) -> None:
    """``[lineage]`` names an environment variable or a file (anchored to the config);
    the effective config records that, and an unkeyed config's effective form has no
    ``lineage`` section, so its manifest reads as it did before keyed lineage existed."""
    keyed = load_campaign(_write(tmp_path, '[lineage]\nkey_file = "keys/lineage.key"\n'))
    assert keyed.lineage.key_file == str(tmp_path / "keys" / "lineage.key")
    assert keyed.as_dict()["lineage"] == {"key_env": None, "key_file": keyed.lineage.key_file}
    by_env = load_campaign(_write(tmp_path, '[lineage]\nkey_env = "ROWGATE_LINEAGE_KEY"\n'))
    assert by_env.lineage.keyed
    assert "lineage" not in CampaignConfig().as_dict()
    assert "lineage" not in load_campaign(DATA / "campaign.toml").as_dict()
