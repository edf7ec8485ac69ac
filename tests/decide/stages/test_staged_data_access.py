"""Stages reach staged data only through the global context (``ctx.evaluate``, ``fetch``,
``scan``, ``staged``) or, in an engine step, the storage object the context gave them:
never through the staging layout's paths or helpers. Checked on the source, so a new
stage cannot slip past it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

#: read as source, not imported: the check must not depend on the stages importing
STAGES = ROOT / "pipeline" / "decide" / "stages"
#: what a stage may import from the storage package: the object and what it returns
_STORAGE_NAMES = frozenset({"RunStorage", "WrittenFile"})
#: attributes that lead to a staged file's path, or read one without the layout's care
_PATH_ATTRIBUTES = frozenset(
    {"root", "staging_root", "staged_path", "spill_dir", "stage_writer", "scan_ipc", "read_ipc"}
)


def _violations(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {alias.name}"
                for alias in node.names
                if alias.name.startswith(("pipeline.gate.staging", "pipeline.storage"))
            ]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == "pipeline.gate.staging" or (
                node.module == "pipeline.gate" and any(a.name == "staging" for a in node.names)
            ):
                found.append(f"line {node.lineno}: from {node.module} import ...")
            elif node.module.startswith("pipeline.storage"):
                found += [
                    f"line {node.lineno}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name not in _STORAGE_NAMES
                ]
        elif isinstance(node, ast.Attribute) and node.attr in _PATH_ATTRIBUTES:
            found.append(f"line {node.lineno}: .{node.attr}")
    return found


@pytest.mark.parametrize("module", sorted(STAGES.glob("*.py")), ids=lambda p: p.name)
def test_stages_reach_staged_data_only_through_the_context(module: Path) -> None:
    assert _violations(module.read_text("utf-8")) == []


def test_the_check_finds_the_ways_around_the_context() -> None:
    source = (
        "from pipeline.gate.staging import scan_staged\n"
        "from pipeline.gate import staging\n"
        "import pipeline.gate.staging\n"
        "from pipeline.storage import STAGING_DIR, RunStorage\n"
        "x = ctx.root / 'y'\n"
        "y = ctx.storage.staged_path(0, kind)\n"
        "z = pl.scan_ipc(path)\n"
    )
    assert [v.split(":")[0] for v in _violations(source)] == [
        f"line {n}" for n in (1, 2, 3, 4, 5, 6, 7)
    ]
