"""Campaign config: the [rubrics], [scoring.<kind>] and [policy.<kind>] sections."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.config import ConfigError, load_campaign
from tests.conftest import DATA


def test_bundled_rubric_campaign_loads() -> None:
    config = load_campaign(DATA / "campaign-pairwise-rubric.toml")
    scoring = config.scoring["pairwise-v2"]
    assert scoring.rubric == "code-review-v1"
    assert scoring.criteria["correctness"] == "ratings.factuality"
    assert scoring.gates["required_tests_pass"] == "not_applicable"
    assert config.resolve_path(config.policy["pairwise-v2"].file).is_file()
    assert config.as_dict()["scoring"]["pairwise-v2"]["rubric"] == "code-review-v1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[scoring.pairwise-v2]\nrubric = 'r'\ncriterion = {}",
            "scoring.pairwise-v2.criterion: unknown key",
        ),
        ("[scoring.pairwise-v2]\ncriteria = {}", "scoring.pairwise-v2: .*rubric"),
        (
            "[scoring.pairwise-v2]\nrubric = 'r'\ncriteria = { a = 1 }",
            "scoring.pairwise-v2.criteria.a: expected str",
        ),
        (
            "[scoring.pairwise-v2]\nrubric = 'r'\nallowed_imports = 'numpy'",
            "allowed_imports: expected an array",
        ),
        ("[policy.pairwise-v2]\nsha256 = 'x'", "policy.pairwise-v2: .*file"),
        (
            "[policy.pairwise-v2]\nfile = 'p.toml'\nsha256 = 'ABC'",
            "policy.pairwise-v2.sha256: expected a SHA-256",
        ),
        (
            "[rubrics.pins]\ncode-review-v1 = 'abc'",
            "rubrics.pins.code-review-v1: expected a SHA-256",
        ),
        ("[rubrics]\ndirectroy = 'x'", "rubrics.directroy: unknown key"),
    ],
)
def test_invalid_sections_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_campaign(path)
