"""Two run directories hold the same outputs: exit 0, or 1 naming every difference.

Every file but the manifest must be byte-identical (Parquet parts, report.html). The
manifests must be equal once ``timings`` are dropped and absolute paths (where the
inputs, schemas and rubrics were read from) are blanked.

    python .ci/same_outputs.py WHEEL_OUT EDITABLE_OUT [--schemas-under DIR]

``--schemas-under DIR``: every schema the first run recorded was read from under DIR (the
installed package), not from the checkout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def _comparable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items() if k != "timings"}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if isinstance(value, str) and Path(value).is_absolute():
        return "<path>"
    return value


def differences(first: Path, second: Path, schemas_under: Path | None = None) -> list[str]:
    problems = []
    one, two = _files(first), _files(second)
    problems += [f"only in {first}: {name}" for name in sorted(one.keys() - two.keys())]
    problems += [f"only in {second}: {name}" for name in sorted(two.keys() - one.keys())]
    problems += [
        f"bytes differ: {name}"
        for name in sorted(one.keys() & two.keys())
        if one[name] != two[name]
    ]
    manifests = [json.loads((out / MANIFEST).read_text("utf-8")) for out in (first, second)]
    if _comparable(manifests[0]) != _comparable(manifests[1]):
        problems.append(f"{MANIFEST} differs beyond timings and paths")
    if schemas_under is not None:
        paths = [entry["path"] for entry in manifests[0]["schemas"].values()]
        if not paths:
            problems.append(f"{first}/{MANIFEST} records no schema")
        problems += [
            f"schema read outside {schemas_under}: {path}"
            for path in paths
            if not Path(path).resolve().is_relative_to(schemas_under.resolve())
        ]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--schemas-under", type=Path)
    args = parser.parse_args()
    problems = differences(args.first, args.second, args.schemas_under)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
