"""The run manifest: what went in, what came out, and proof that nothing was lost.

``manifest.json`` records inputs (path, bytes, SHA-256, lines), the effective config and
its digest, schema digests, tool and dependency versions, counts per disposition and
reason, the conservation check, every output file with its digest, and timings
(DESIGN §3.7). ``rowgate verify`` checks a run against it.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
from pathlib import Path
from typing import Any, Final

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "ManifestError",
    "dependency_versions",
    "load_manifest",
    "write_manifest",
]

MANIFEST_NAME: Final = "manifest.json"
MANIFEST_FORMAT: Final = "rowgate-run/1"
_DEPENDENCIES: Final = (
    "rowgate",
    "polars",
    "pyarrow",
    "orjson",
    "fastjsonschema",
    "xxhash",
    "zstandard",
    "phonenumbers",
    "typer",
    "rich",
    "numpy",
    "matplotlib",
)


def dependency_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _DEPENDENCIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def write_manifest(directory: Path, manifest: dict[str, Any]) -> Path:
    path = directory / MANIFEST_NAME
    path.write_text(
        json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n", "utf-8"
    )
    return path


class ManifestError(ValueError):
    """A missing or unreadable manifest."""


def load_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise ManifestError(f"cannot read {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{path} is not a {MANIFEST_FORMAT} manifest")
    return manifest
