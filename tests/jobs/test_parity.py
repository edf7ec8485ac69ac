"""Outputs do not depend on how the work is cut: worker counts {1, 2} and partition counts
of the global phase's shuffles (near dedupe's candidate search, the hash-first checks)
{1, 7, 64, automatic}, on the bundled campaign (with the normalised and near rules on)
and on a corpus with planted exact, normalised and near duplicates and cross-record
conflicts, deduplicated with every rule and with exact dedupe alone (whose repeated
fingerprints are found on the engine) (engines: ``tests/engines/test_ray_engine.py``).
No cut changes an input.

Each cut's tasks are independent of the other setting (a partition task runs on any
worker), so the cuts cover every value of each rather than the product; the planted
corpus, where the near rule has candidates to find, takes every partition count."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.config import CampaignConfig, load_campaign
from pipeline.jobs.run import run
from tests.conftest import DATA
from tests.parity import output_digests, planted_campaign

#: (workers, partitions) per campaign; ``None``: the automatic count
CUTS: dict[str, list[tuple[int, int | None]]] = {
    "bundled": [(1, 1), (2, 64)],
    "planted": [(1, 64), (2, 1), (2, 7), (2, None)],
    "planted, exact only": [(1, 1), (2, 7), (2, 64)],
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> CampaignConfig:
    return planted_campaign(tmp_path_factory.mktemp("planted"))


@pytest.mark.slow
@pytest.mark.parametrize("campaign", list(CUTS))
def test_workers_and_partitions_give_identical_outputs(
    tmp_path: Path, planted: CampaignConfig, campaign: str
) -> None:
    if campaign == "bundled":
        config = load_campaign(DATA / "campaign.toml").override(
            **{"dedupe.normalised": True, "dedupe.near": True}
        )
    elif campaign == "planted":
        config = planted
    else:
        config = planted.override(**{"dedupe.normalised": False, "dedupe.near": False})
    inputs = {path: path.read_bytes() for path in map(config.resolve, config.inputs)}
    digests = {}
    for workers, partitions in CUTS[campaign]:
        out = tmp_path / f"w{workers}-p{partitions}"
        result = run(
            config.override(**{"engine.workers": workers, "engine.partitions": partitions}),
            out,
        )
        digests[workers, partitions] = output_digests(out)
    # the decisions compared are there to compare: the cross-record rules found
    # conflicts and repeats, and in the planted corpus every dedupe rule removed rows (the
    # bundled samples' repeats are all retries, which the cross-record rules take first)
    counts = result.manifest["counts"]["by_reason"]
    assert any(code.startswith("cross.") for reasons in counts.values() for code in reasons)
    rules = result.manifest["global"]["dedupe"]["pairwise-v2"]["by_rule"]
    if campaign == "planted":
        assert min(rules["exact"], rules["normalised"], rules["near"]) > 0, rules
    elif campaign == "planted, exact only":
        assert rules["exact"] > 0, rules
    assert {path: path.read_bytes() for path in inputs} == inputs
    reference = digests[CUTS[campaign][0]]
    assert len(reference) > 5
    for cut, found in digests.items():
        assert found == reference, cut
