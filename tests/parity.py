"""What the parity tests compare: the campaign they run and the digests of a run's outputs.

Outputs must not depend on where or how finely the work is cut (workers, partitions,
engines): every output file byte for byte, and the manifest apart from its timings and
the settings that say where steps ran.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import orjson

from pipeline.core.config import CampaignConfig, InputSpec
from pipeline.testing.corpus import duplicate_corpus
from pipeline.testing.synthetic import decide_rows_with_conflicts, export_lines

#: engine settings that say where steps run, not what they write (the shards they cut
#: show in the part files)
WHERE_STEPS_RUN = ("name", "workers", "max_retries", "partitions")


def planted_campaign(root: Path) -> CampaignConfig:
    """Inputs cut into many small shards, with planted defects, repeats and cross-record
    conflicts (the synthetic exports, and pw-decide-row sessions naming two models and
    workers with no coordinator) and exact, normalised and near duplicates (the duplicate
    corpus), deduplicated with every rule."""
    specs = []
    for kind, count, seed in (("pairwise-v2", 500, 3), ("pw-decide-row-1", 300, 4)):
        path = root / f"{kind}.jsonl"
        lines = export_lines(kind, count, seed=seed, defect_rate=0.08, duplicate_rate=0.08)
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        specs.append(InputSpec(str(path), kind))
    conflicts = root / "pw-decide-row-conflicts.jsonl"
    records = decide_rows_with_conflicts(200, seed=5)
    conflicts.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    specs.append(InputSpec(str(conflicts), "pw-decide-row-1"))
    planted = root / "planted.jsonl"
    rows = duplicate_corpus(600, seed=21, duplicate_rate=0.35)
    planted.write_bytes(b"".join(row.line + b"\n" for row in rows))
    specs.append(InputSpec(str(planted), "pairwise-v2"))
    return CampaignConfig(inputs=tuple(specs)).override(
        **{"engine.shard_bytes": 64 * 1024, "engine.workers": 2}
        | {"dedupe.normalised": True, "dedupe.near": True}
    )


def output_digests(out: Path) -> dict[str, str]:
    """sha256 of every output file; the manifest's without its timings (wall clock) and
    the engine settings of :data:`WHERE_STEPS_RUN`."""
    digests = {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.pop("timings")
    engine = manifest["config"]["engine"]
    for setting in WHERE_STEPS_RUN:
        engine.pop(setting, None)
    manifest.pop("config_effective_sha256")  # the digest of the settings above, too
    digests["manifest.json"] = hashlib.sha256(
        json.dumps(manifest, sort_keys=True).encode()
    ).hexdigest()
    return digests
