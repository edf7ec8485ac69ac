"""Rubric scoring and decision policy throughput (no peer does this; absolute rates).

    .venv/bin/python benchmarks/scoring.py [ROWS] [WORKERS]

1. the vectorised core: :func:`score_frame` + :func:`decide_frame` on ROWS observed rows;
2. the built-in code gates: :func:`analyse_source` per distinct source text;
3. the two stages inside a real run of the bundled pairwise campaign over a synthetic
   export of ROWS rows (from the manifest's ``global.scoring_s`` / ``global.policy_s``).
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from pipeline.core.config import InputSpec, load_campaign
from pipeline.jobs.run import run
from pipeline.rubrics.builtin_gates import analyse_source
from pipeline.rubrics.decision_policy import decide_frame, load_policy
from pipeline.rubrics.model import RUBRIC_DIR, RubricRegistry
from pipeline.rubrics.scoring import score_frame
from pipeline.testing.synthetic import export_lines

ROOT = Path(__file__).resolve().parent.parent


def core(rows: int) -> None:
    rubric = RubricRegistry().get("code-review-v1")
    policy = load_policy(RUBRIC_DIR / "code-review-v1.policy.toml")
    rng = random.Random(0)
    observed = pl.DataFrame(
        {
            **{
                f"criterion:{c.id}": [float(rng.randint(1, 5)) for _ in range(rows)]
                for c in rubric.criteria
            },
            "gate:syntax_valid": [rng.random() > 0.02 for _ in range(rows)],
            "gate:max_cyclomatic_complexity_per_function": [
                float(rng.randint(1, 14)) for _ in range(rows)
            ],
            "gate:unapproved_dependencies": [rng.random() < 0.02 for _ in range(rows)],
            "gate:required_tests_pass": [rng.choice([True, False, None]) for _ in range(rows)],
        }
    )
    started = time.perf_counter()
    scored = score_frame(rubric, observed)
    scoring = time.perf_counter() - started
    scored = scored.with_columns(
        _reason_codes=pl.col("_reasons_add").list.eval(pl.element().struct.field("code"))
    )
    started = time.perf_counter()
    decide_frame(policy, rubric, scored)
    policy_s = time.perf_counter() - started
    per = 100_000 / rows
    print(
        f"core: score_frame {scoring * per:.3f} s / 100k rows; decide_frame {policy_s * per:.3f} s / 100k rows"
    )


def builtins(sources: int) -> None:
    rng = random.Random(1)
    from pipeline.testing.synthetic import pairwise

    texts = [pairwise(rng, i, 3)["response_a"] for i in range(sources)]
    started = time.perf_counter()
    for text in texts:
        analyse_source(text)
    elapsed = time.perf_counter() - started
    size = sum(len(t) for t in texts) / sources
    print(
        f"built-in gates: {elapsed / sources * 1e6:.0f} µs per distinct source (~{size:.0f} chars)"
    )


def stages(rows: int, workers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "pairwise.jsonl"
        source.write_bytes(
            b"".join(line + b"\n" for line in export_lines("pairwise-v2", rows, seed=7))
        )
        config = load_campaign(ROOT / "data" / "campaign-pairwise-rubric.toml")
        config = config.override(
            inputs=(InputSpec(str(source), "pairwise-v2"),),
            **{"engine.workers": workers, "engine.shard_bytes": 16 << 20},
        )
        result = run(config, Path(tmp) / "out")
        timings = result.manifest["timings"]
        per = 100_000 / rows
        print(
            f"run of {rows:,} rows, {workers} worker(s): scoring stage {timings['global.scoring_s'] * per:.2f} s / 100k rows, "
            f"policy stage {timings['global.policy_s'] * per:.2f} s / 100k rows "
            f"(gate {timings['gate_s'] * per:.2f} s / 100k rows, for scale)"
        )


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    core(n)
    builtins(min(n, 20_000))
    for count in sorted({1, workers}):
        stages(n, count)
