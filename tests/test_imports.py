"""The import contract (``[tool.importlinter]`` in pyproject.toml): the packages follow the
flow, and a package that imports one above it breaks the build. Checked on the tree as it
is, and on a copy with one upward import planted (the gate's reader importing the writer),
so the contract is shown to be able to fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

pytestmark = pytest.mark.skipif(
    not LINT_IMPORTS.exists(), reason="lint-imports (import-linter, a dev dependency) is missing"
)


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_tree_keeps_the_import_contract() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(
        ROOT / "pipeline", tmp_path / "pipeline", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    reader = tmp_path / "pipeline" / "gate" / "reader.py"
    reader.write_text(
        reader.read_text("utf-8") + "\nfrom pipeline.output import writer  # planted\n"
    )
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "pipeline.gate.reader -> pipeline.output.writer" in result.stdout, result.stdout
