"""The package is self-contained: a wheel carries every file a run reads, and an installed
rowgate writes the same outputs as the checkout, from any working directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from pipeline.core.bundled import bundled_dir
from pipeline.records.schemas import SCHEMA_DIR
from pipeline.rubrics.model import RUBRIC_DIR
from tests.conftest import DATA, ROOT

SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
#: the bundled campaigns: the README's main job and the rubric-scored one
CAMPAIGNS = ("campaign.toml", "campaign-pairwise-rubric.toml")


def test_the_wheel_lists_every_package_and_every_bundled_file() -> None:
    mapped = SETUPTOOLS["package-dir"]
    code = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "pipeline").rglob("__init__.py")
    }
    assert set(SETUPTOOLS["packages"]) - set(mapped) == code
    for package, folder in mapped.items():
        patterns = SETUPTOOLS["package-data"][package]
        files = [p.name for p in (ROOT / folder).iterdir()]
        assert files
        assert [f for f in files if not any(fnmatch(f, p) for p in patterns)] == []


def test_a_checkout_reads_the_top_level_folders() -> None:
    assert SCHEMA_DIR == bundled_dir("schemas") == ROOT / "schemas"
    assert RUBRIC_DIR == bundled_dir("rubrics") == ROOT / "rubrics"


def _run(python_path: Path, config: Path, out: Path, cwd: Path) -> None:
    """``python -m pipeline run`` with only ``python_path`` ahead of the installed packages."""
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    command = [sys.executable, "-m", "pipeline", "run", "--config", str(config), "--out", str(out)]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_an_installed_wheel_runs_the_bundled_campaigns_like_the_checkout(tmp_path: Path) -> None:
    """Built from a copy of the sources and installed outside the checkout, rowgate reads
    its schemas from its own package and writes the checkout's bytes (the same check as
    .ci/run, without a fresh virtualenv: the dependencies are this environment's)."""
    source = _mkdir(tmp_path / "source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("pipeline", "schemas", "rubrics"):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    offline = ["--no-deps", "--no-index"]
    subprocess.run(
        [*pip, "wheel", *offline, "--no-build-isolation", "-w", tmp_path / "dist", source],
        check=True,
    )
    site = tmp_path / "site"
    subprocess.run(
        [*pip, "install", *offline, "--target", site, *(tmp_path / "dist").glob("*.whl")],
        check=True,
    )
    elsewhere = _mkdir(tmp_path / "elsewhere")
    for campaign in CAMPAIGNS:
        _run(site, DATA / campaign, tmp_path / "wheel" / campaign, elsewhere)
        _run(ROOT, DATA / campaign, tmp_path / "checkout" / campaign, elsewhere)
        compare = [
            ROOT / ".ci" / "same_outputs.py",
            tmp_path / "wheel" / campaign,
            tmp_path / "checkout" / campaign,
        ]
        done = subprocess.run(
            [sys.executable, *compare, "--schemas-under", site], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path
