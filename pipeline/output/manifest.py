"""The run manifest: what went in, what came out, and proof that nothing was lost.

``manifest.json`` records inputs (path, bytes, SHA-256, lines), the effective config and
its digest, schema digests, tool and dependency versions, counts per disposition and
reason, the conservation check, every output file with its digest, every pinned file the
run read (rubrics, policies, reference tables, the sanitization policy) with its digest,
the canonicalization procedure and its version, whether exact replay is expected, and
timings (DESIGN §3.7; the AutoQA evaluation contract §§7.1, 17). ``rowgate verify``
recomputes all of it. A path that is not UTF-8 is held in its lineage form, its exact
bytes beside it (``resolved_hex``, ``path_hex``, ``config_hex``): only the bytes name the
file.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
from pathlib import Path
from typing import Any, ClassVar, Final

from pipeline.core.errors import EXIT_INPUT, RowgateError
from pipeline.records.canonical import CANONICALIZATION, canonical_json
from pipeline.records.lineage import exact_path, file_sha256, path_hex, source_name

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "REPLAY",
    "ManifestError",
    "config_hex",
    "dependency_versions",
    "effective_config_sha256",
    "exact_config",
    "load_manifest",
    "pinned_digests",
    "pinned_files",
    "write_manifest",
]

MANIFEST_NAME: Final = "manifest.json"
MANIFEST_FORMAT: Final = "rowgate-run/1"
#: The AutoQA evaluation contract §17: "The audit record MUST state whether exact replay
#: is expected." It is: the parity tests hold every output byte-identical for any worker
#: count, partition count and engine.
REPLAY: Final = {
    "exact": True,
    "scope": (
        "every output file is byte-identical for the same inputs, config and versions "
        "(rowgate and its dependencies), whatever the engine or worker count; "
        "manifest.json differs only in timings and in the settings that say where steps "
        "ran (config.engine's name, workers, max_retries and partitions, and so "
        "config_effective_sha256)"
    ),
}
_DEPENDENCIES: Final = (
    "rowgate",
    "polars",
    "pyarrow",
    "orjson",
    "fastjsonschema",
    "xxhash",
    "zstandard",
    "backports.zstd",
    "phonenumbers",
    "typer",
    "rich",
    "numpy",
    "numba",
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


def effective_config_sha256(config: dict[str, Any]) -> str:
    """SHA-256 of the RFC 8785 canonical JSON of the effective config as the manifest
    holds it (what ``rowgate verify`` recomputes from the manifest's own content)."""
    return hashlib.sha256(canonical_json(config)).hexdigest()


def config_hex(config: dict[str, Any]) -> dict[str, Any]:
    """The exact bytes, in hex (:func:`~pipeline.records.lineage.path_hex`), of each
    setting of an effective config (:meth:`~pipeline.core.config.CampaignConfig.as_dict`)
    that is not UTF-8, at its place in ``config`` and nowhere else: empty for a UTF-8
    config, whose manifest then holds no ``config_hex``.

    The manifest holds the config in its lineage form, as JSON must, and verify digests
    that form; but a config under a directory whose name is not UTF-8 names its file,
    its directory and every path anchored there (reference tables, rubrics, policies,
    schemas, the lineage key) only in it, and verify re-reads them all. An input spec's
    path (a list item) is not included: its exact bytes are its input's ``resolved_hex``.
    """
    found: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            inner = config_hex(value)
            if inner:
                found[key] = inner
        elif isinstance(value, str) and (exact := path_hex(value)) is not None:
            found[key] = exact
    return found


def exact_config(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest's config with each setting ``config_hex`` records restored to its
    exact bytes: what verify reads files from (re-hashes the config and pinned files,
    builds the run's gate with). Its digest is of the config as recorded, never of this.

    A recorded hex whose lineage form is not the setting's is a :class:`ValueError` (a
    mangled manifest, :func:`~pipeline.records.lineage.exact_path`)."""

    def restore(config: dict[str, Any], exact: dict[str, Any]) -> dict[str, Any]:
        restored = dict(config)
        for key, value in exact.items():
            if isinstance(value, dict):
                restored[key] = restore(config[key], value)
            else:
                restored[key] = exact_path(config[key], value)
        return restored

    return restore(manifest["config"], manifest.get("config_hex", {}))


def pinned_files(manifest: dict[str, Any]) -> list[dict[str, str]]:
    """Every file besides the inputs and schemas whose bytes decided the run's outcome,
    derived from the manifest's effective config: ``{role, name, path}``. A path is as
    the config holds it: a run derives them from its own config (exact bytes), verify
    from :func:`exact_config`.

    Rubrics (and the rubric format's schema), decision policies, reference tables and
    the sanitization policy. The schemas are listed, with their digests, under
    ``schemas``.
    """
    from pipeline.rubrics.model import FORMAT_SCHEMA, RUBRIC_DIR

    config = manifest["config"]

    def resolve(given: str) -> str:
        path = Path(given)
        return str(path if path.is_absolute() else Path(config["base_dir"]) / path)

    found: list[dict[str, str]] = []
    rubrics = config["rubrics"]
    rubric_ids = sorted({*rubrics["pins"], *(s["rubric"] for s in config["scoring"].values())})
    if rubric_ids:
        directory = Path(resolve(rubrics["directory"])) if rubrics["directory"] else RUBRIC_DIR
        format_schema = directory / FORMAT_SCHEMA
        if not format_schema.is_file():
            format_schema = RUBRIC_DIR / FORMAT_SCHEMA
        found.append({"role": "rubric_format", "name": "rubric", "path": str(format_schema)})
        found += [
            {"role": "rubric", "name": r, "path": str(directory / f"{r}.json")} for r in rubric_ids
        ]
    found += [
        {"role": "policy", "name": kind, "path": resolve(policy["file"])}
        for kind, policy in sorted(config["policy"].items())
    ]
    found += [
        {"role": "reference_table", "name": name, "path": resolve(table["path"])}
        for name, table in sorted(config["references"].items())
        if table is not None
    ]
    if manifest.get("sanitize"):
        found.append(
            {"role": "sanitize_policy", "name": "sanitize", "path": manifest["sanitize"]["policy"]}
        )
    return found


def pinned_digests(manifest: dict[str, Any]) -> list[dict[str, str]]:
    """Each pinned file (:func:`pinned_files`) with its digest, the manifest's ``pinned``,
    derived from a run's manifest before its lineage form: a file is hashed at its real
    path, which the lineage form of a path that is not UTF-8 does not name. Its entry
    records that form as ``path``, and then its exact bytes as ``path_hex`` (as an input's
    ``resolved_hex``): verify finds the file by them."""
    found = []
    for entry in pinned_files(manifest):
        path = entry["path"]
        exact = path_hex(path)
        found.append(
            {
                **entry,
                "path": source_name(path),
                **({"path_hex": exact} if exact is not None else {}),
                "sha256": file_sha256(path),
            }
        )
    return found


def write_manifest(directory: Path, manifest: dict[str, Any], pinned: list[dict[str, str]]) -> Path:
    """Complete ``manifest`` with what ``rowgate verify`` recomputes but the run does not
    otherwise hold (the effective config's digest, each pinned file's digest: ``pinned``,
    from :func:`pinned_digests`), then write it."""
    # through JSON first: the digest is of the config as a reader of the file sees it
    config = json.loads(json.dumps(manifest["config"]))
    manifest["canonicalization"] = CANONICALIZATION
    manifest["replay"] = REPLAY
    manifest["config_effective_sha256"] = effective_config_sha256(config)
    manifest["pinned"] = pinned
    path = directory / MANIFEST_NAME
    path.write_text(
        json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n", "utf-8"
    )
    return path


class ManifestError(RowgateError, ValueError):
    """A missing or unreadable manifest."""

    exit_code: ClassVar[int] = EXIT_INPUT


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
