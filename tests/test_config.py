"""The campaign config: strict TOML loading, paths, overrides."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipeline.config import CampaignConfig, ConfigError, load_campaign
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
    ("text", "message"),
    [
        ("nmae = 'x'", "nmae: unknown key"),
        ("[limits]\nmax_depht = 3", "limits.max_depht: unknown key"),
        ("[limits]\nmax_depth = 'deep'", "limits.max_depth: expected int, got str"),
        ("[limits]\nmax_depth = true", "limits.max_depth: expected int, got bool"),
        ("[limits]\nmax_depth = 0", "limits.max_depth: must be at least 1"),
        ("[limits]\nmax_depth = 255", "limits.max_depth: at most 254"),
        ("[limits]\nmax_line_bytes = 2147483648", "limits.max_line_bytes: at most 1073741824"),
        ("[engine]\nbatch_bytes = 0", "engine.batch_bytes: must be between 1 and 1073741824"),
        ("[[inputs]]\nkind = 'pairwise-v2'", "inputs[0]"),
        ("[[inputs]]\npath = 'a'\n[[inputs]]\npath = 'a'", "inputs[1].path: 'a' is listed twice"),
        ("[engine]\nname = 'spark'", "engine.name: unknown engine"),
        ("[output]\ncompression = 'brotli2'", "output.compression: unknown codec"),
        ("[schemas.pins]\npairwise-v2 = 3", "schemas.pins.pairwise-v2: expected str"),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_invalid_configs_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_campaign(_write(tmp_path, text))


def test_overrides_are_validated() -> None:
    config = CampaignConfig().override(**{"engine.workers": 3, "limits.max_depth": 10})
    assert config.engine.workers == 3
    assert config.limits.max_depth == 10
    with pytest.raises(ConfigError, match=r"engine\.wrokers: unknown setting"):
        CampaignConfig().override(**{"engine.wrokers": 3})
    with pytest.raises(ConfigError, match="must be at least 1"):
        CampaignConfig().override(**{"engine.workers": 0})


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_campaign(tmp_path / "absent.toml")


def test_the_documented_campaign_example_loads(tmp_path: Path) -> None:
    """The config page's example must stay a valid config (digests stand in for the "…")."""
    import re

    page = (Path(__file__).resolve().parent.parent / "docs" / "config.md").read_text("utf-8")
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
