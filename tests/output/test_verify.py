"""``rowgate verify`` trusts nothing: every claim of the manifest is recomputed.

One run of a campaign that reads every kind of pinned file (a reference table, a rubric
and its format schema, a decision policy, a sanitization policy, its config file), all
copied beside the test so they can be changed; each test tampers with a copy of its
output (or with one of those files, restored afterwards) and expects a mismatch.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.config import CampaignConfig, InputSpec, load_campaign
from pipeline.jobs.run import run
from pipeline.output.manifest import ManifestError, exact_config
from pipeline.output.verify import read_paths, verify_run
from pipeline.records.lineage import file_sha256, source_name
from pipeline.sanitize.sanitizer import DEFAULT_POLICY
from pipeline.testing.synthetic import export_lines
from tests.conftest import DATA, ROOT

Manifest = dict[str, Any]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A campaign directory whose every file the run reads is a copy the tests may change."""
    here = tmp_path_factory.mktemp("campaign")
    for name in ("pairwise-v2.jsonl", "grounded-qa-v1.jsonl", "documents.jsonl"):
        shutil.copy(DATA / name, here / name)
    shutil.copytree(ROOT / "rubrics", here / "rubrics")
    shutil.copy(DEFAULT_POLICY, here / "sanitize.toml")
    scoring = (DATA / "campaign-pairwise-rubric.toml").read_text()
    scoring = scoring[scoring.index("[scoring.") :].replace(
        "../rubrics/code-review-v1.policy.toml", "rubrics/code-review-v1.policy.toml"
    )
    (here / "campaign.toml").write_text(
        'name = "verify"\n'
        '[[inputs]]\npath = "pairwise-v2.jsonl"\nkind = "pairwise-v2"\n'
        '[[inputs]]\npath = "grounded-qa-v1.jsonl"\nkind = "grounded-qa-v1"\n'
        '[references.documents]\npath = "documents.jsonl"\n'  # unpinned: verify still re-hashes it
        '[rubrics]\ndirectory = "rubrics"\n'
        '[sanitize]\nenabled = true\npolicy = "sanitize.toml"\n' + scoring
    )
    return here


@pytest.fixture(scope="module")
def pristine(campaign: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "out"
    config = load_campaign(campaign / "campaign.toml").override(**{"engine.workers": 1})
    run(config, out)
    report = verify_run(out)
    assert report.ok, report.problems
    return out


@pytest.fixture
def out(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(pristine, copy, symlinks=True)
    return copy


def _edit(out: Path, change: Callable[[Manifest], None]) -> None:
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=2))


def _fails(out: Path, *expected: str) -> list[str]:
    report = verify_run(out)
    assert not report.ok
    for text in expected:
        assert any(text in p for p in report.problems), report.problems
    return report.problems


@contextmanager
def _changed(path: Path) -> Iterator[None]:
    original = path.read_bytes()
    try:
        path.write_bytes(original + b"\n")
        yield
    finally:
        path.write_bytes(original)


def _relabel_a_file(m: Manifest) -> None:
    """Call an accepted file's rows rejected, every count kept consistent with the lie."""
    entry = next(e for e in m["outputs"] if e["disposition"] == "accepted")
    entry["disposition"] = "rejected"
    m["counts"]["by_disposition"]["accepted"] -= entry["rows"]
    m["counts"]["by_disposition"]["rejected"] += entry["rows"]


def _more_lines(m: Manifest) -> None:
    m["counts"]["lines"] += 1
    m["conservation"]["lines_read"] += 1
    m["conservation"]["rows_written"] += 1


def _one_reason_more(m: Manifest) -> None:
    codes = m["counts"]["by_reason"]["rejected"]
    codes[next(iter(codes))] += 1


def _set(*keys: str, value: Any) -> Callable[[Manifest], None]:
    def change(m: Manifest) -> None:
        target = m
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_one_reason_more, "counts per reason"),
        (_more_lines, "conservation record"),
        (_relabel_a_file, "the path says"),
        (_set("conservation", "ok", value=False), "conservation record"),
        (_set("config", "limits", "max_depth", value=3), "effective config"),
        (_set("config", "dedupe", "near", value=True), "effective config"),
        (_set("config_sha256", value="0" * 64), "config_sha256"),
    ],
    ids=["reason", "lines", "disposition", "conservation", "limit", "dedupe", "config-digest"],
)
def test_an_edited_manifest_fails(
    out: Path, change: Callable[[Manifest], None], expected: str
) -> None:
    _edit(out, change)
    _fails(out, expected)


def test_an_edited_config_with_its_digest_recomputed_fails_on_the_outputs(out: Path) -> None:
    """A forger who also recomputes the effective config's digest is caught where the
    config shows in the files: their compression."""
    from pipeline.output.manifest import effective_config_sha256

    def change(m: Manifest) -> None:
        m["config"]["output"]["compression"] = "snappy"
        m["config_effective_sha256"] = effective_config_sha256(m["config"])

    _edit(out, change)
    _fails(out, "compressed with ZSTD, the config says snappy")


@pytest.mark.parametrize(
    "stray",
    [
        "notes.txt",
        "accepted/x/_metadata",
        "accepted/empty/",
        ".hidden",
        "rejected/part-99999.parquet",
    ],
)
def test_a_file_or_directory_the_manifest_does_not_list_fails(out: Path, stray: str) -> None:
    target = out / stray
    if stray.endswith("/"):
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"x")
    first = stray.split("/x/")[0] if "/x/" in stray else stray.rstrip("/")
    _fails(out, first)


def test_an_input_dropped_from_the_manifest_or_added_to_it_fails(out: Path) -> None:
    """An input removed from ``inputs`` (with its rows, counts and digests resealed)
    passed: the lineage check walks ``inputs``, and the config that names it was not
    compared with them."""
    _edit(out, lambda m: m["inputs"].remove(m["inputs"][0]))
    _fails(out, "input grounded-qa-v1.jsonl, which the config names, is not an input of the run")
    _edit(out, lambda m: m["inputs"].append({**m["inputs"][0], "path": "other.jsonl"}))
    _fails(out, "input other.jsonl: the config names no such input")


def test_a_run_of_an_input_directory_verifies(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    lines = (DATA / "pairwise-v2.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "in" / "a.jsonl").write_bytes(b"".join(lines[:5]))
    (tmp_path / "in" / "b.jsonl").write_bytes(b"".join(lines[5:9]))
    config = CampaignConfig(inputs=(InputSpec(str(tmp_path / "in"), "pairwise-v2"),))
    run(config.override(**{"engine.workers": 1}), tmp_path / "out")
    report = verify_run(tmp_path / "out")
    assert report.ok, report.problems
    assert report.checked["inputs"] == 2
    # a member dropped from the manifest's inputs (here: one it never had) is found by
    # listing the directory; at least one member was enough before
    (tmp_path / "in" / "c.jsonl").write_bytes(b"")
    _fails(tmp_path / "out", "input directory", "holds c.jsonl, which is no input of the run")


def test_a_record_edited_with_its_digests_recomputed_fails(tmp_path: Path) -> None:
    """An accepted row's label flipped, its ``_record_sha256`` and content fingerprint
    recomputed and the part resealed passed: every row was checked against itself, and
    its line only by offset and raw digest. The record is now derived from the line
    (in a run whose sanitization, off, cannot have changed it)."""
    from pipeline.kinds import KINDS
    from pipeline.output.manifest import load_manifest
    from pipeline.output.verify import VerifyReport, _schemas
    from pipeline.records.canonical import canonical_json

    (tmp_path / "in.jsonl").write_bytes(
        b"".join((DATA / "pairwise-v2.jsonl").read_bytes().splitlines(keepends=True)[:3])
    )
    config = CampaignConfig(inputs=(InputSpec(str(tmp_path / "in.jsonl"), "pairwise-v2"),))
    out = tmp_path / "out"
    run(config.override(**{"engine.workers": 1}), out)
    assert verify_run(out).ok
    part = next(out.glob("accepted/pairwise-v2/part-*.parquet"))
    layout, _ = _schemas(load_manifest(out), VerifyReport())["pairwise-v2"]
    table = pq.read_table(part)
    rows = table.to_pylist()
    row = rows[0]
    row["preference"] = "A" if row["preference"] != "A" else "B"
    record = layout.decode_row(row)
    row["_record_sha256"] = hashlib.sha256(canonical_json(record)).hexdigest()
    row["_content_sha256"], row["_content_profile"] = KINDS["pairwise-v2"].fingerprint_and_profile(
        record
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), part, compression="zstd")
    _reseal(out, str(part.relative_to(out)))
    _fails(out, f"in.jsonl:{row['_line']}: the row's record is not the record its line holds")


def test_a_symbolic_link_in_out_fails(out: Path) -> None:
    part = next(out.rglob("accepted/*/*.parquet"))
    moved = out.parent / "elsewhere.parquet"
    part.rename(moved)
    part.symlink_to(moved)
    _fails(out, "symbolic link")


def test_a_listed_path_outside_out_is_refused(out: Path) -> None:
    (out.parent / "outside.html").write_text("x")

    def change(m: Manifest) -> None:
        m["reports"].append({"path": "../outside.html", "bytes": 1, "sha256": "0" * 64})

    _edit(out, change)
    _fails(out, "not a path inside OUT")


#: the files the verify campaign pins besides its config and schemas
_PINNED = (
    "documents.jsonl",
    "rubrics/code-review-v1.json",
    "rubrics/rubric.schema.json",
    "rubrics/code-review-v1.policy.toml",
    "sanitize.toml",
)


@pytest.mark.parametrize("changed", [*_PINNED, "campaign.toml"])
def test_a_changed_pinned_file_fails(pristine: Path, campaign: Path, changed: str) -> None:
    with _changed(campaign / changed):
        _fails(pristine, "changed since the run")
    assert verify_run(pristine).ok


def test_a_config_file_gone_is_a_note_not_a_mismatch(pristine: Path, campaign: Path) -> None:
    config = campaign / "campaign.toml"
    hidden = campaign / "moved.toml"
    config.rename(hidden)
    try:
        report = verify_run(pristine)
    finally:
        hidden.rename(config)
    assert report.ok, report.problems
    assert any("no longer there" in n for n in report.notes)


def test_the_manifest_names_its_canonicalization_and_replay(pristine: Path, out: Path) -> None:
    """The AutoQA evaluation contract §7.1 (the canonicalization and its version are kept
    with the audit record) and §17 (it states whether exact replay is expected)."""
    manifest = json.loads((pristine / "manifest.json").read_text())
    assert manifest["canonicalization"]["procedure"].startswith("RFC 8785")
    assert manifest["canonicalization"]["version"] == "rowgate-jcs/1"
    assert manifest["replay"]["exact"] is True
    # the scope names every setting the parity tests let differ (it said "only in timings")
    from tests.parity import WHERE_STEPS_RUN

    assert all(setting in manifest["replay"]["scope"] for setting in WHERE_STEPS_RUN)
    # Digests made with another procedure cannot be recomputed: verify says so.
    _edit(out, _set("canonicalization", "version", value="jcs-other/2"))
    _fails(out, "canonicalization 'jcs-other/2'")


def test_a_dropped_pinned_digest_fails(out: Path) -> None:
    """The files to re-hash come from the config, so deleting one from the list hides nothing."""
    _edit(out, lambda m: m["pinned"].pop(0))
    _fails(out, "records no digest")


def test_a_manifest_from_before_verify_recomputed_everything_says_so(out: Path) -> None:
    def change(m: Manifest) -> None:
        del m["pinned"], m["config_effective_sha256"]

    _edit(out, change)
    _fails(out, "older rowgate")


def test_a_manifest_without_a_needed_field_is_a_clear_error(out: Path) -> None:
    _edit(out, lambda m: m.pop("counts"))
    with pytest.raises(ManifestError, match="'counts'"):
        verify_run(out)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m["inputs"][0].update(resolved_hex="not hex"),
        lambda m: m["config"]["limits"].update(max_expansion_ratio="x"),
        # exact bytes that are not those of the path beside them: another file's
        lambda m: m["pinned"][0].update(path_hex=os.fsencode("/elsewhere").hex()),
        lambda m: next(iter(m["schemas"].values())).update(path_hex="2f"),
        lambda m: m.update(config_hex={"source_path": os.fsencode("/elsewhere").hex()}),
    ],
    ids=["resolved_hex", "max_expansion_ratio", "path_hex", "schema_path_hex", "config_hex"],
)
def test_a_mangled_value_is_a_clear_error(out: Path, change: Callable[[Manifest], None]) -> None:
    """A value of the right field but the wrong form raised a ValueError: an internal
    error instead of the malformed-manifest error (exit 3)."""
    _edit(out, change)
    with pytest.raises(ManifestError, match="lacks or mangles a field"):
        verify_run(out)


@pytest.fixture(scope="module")
def not_utf8(campaign: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The campaign copied into a directory whose name is not UTF-8 (byte 0xE9), which
    also holds its schemas and lineage key, with its reference table pinned: every file
    the run reads but its inputs is named by a path that is not UTF-8. And its run."""
    root = tmp_path_factory.mktemp("not-utf8")
    here = root / os.fsdecode(b"caf\xe9")
    shutil.copytree(campaign, here)
    shutil.copytree(ROOT / "schemas", here / "schemas")
    (here / "lineage.key").write_text("0123456789abcdef" * 4)
    config = here / "campaign.toml"
    table = '[references.documents]\npath = "documents.jsonl"\n'
    pinned = f'{table}sha256 = "{file_sha256(here / "documents.jsonl")}"\n'
    more = '[schemas]\ndirectory = "schemas"\n[lineage]\nkey_file = "lineage.key"\n'
    config.write_text(config.read_text().replace(table, pinned + more))
    out = root / "out"
    run(load_campaign(config).override(**{"engine.workers": 1}), out)
    return here, out


def test_a_run_under_a_directory_whose_name_is_not_utf8_verifies(
    not_utf8: tuple[Path, Path],
) -> None:
    """The run failed (its pinned files hashed at their paths' lineage form, which names
    no file), and verify looked every file up there: the config, the pinned files, the
    schemas, the files the gate is built again from, the lineage key. Each pinned and
    schema entry keeps its exact bytes (``path_hex``), the config its own (``config_hex``),
    and verify finds each file by them."""
    here, out = not_utf8
    manifest = json.loads((out / "manifest.json").read_text())
    assert {e["role"] for e in manifest["pinned"]} == {
        "rubric_format",
        "rubric",
        "policy",
        "reference_table",
        "sanitize_policy",
    }
    for entry in [*manifest["pinned"], *manifest["schemas"].values()]:
        exact = os.fsdecode(bytes.fromhex(entry["path_hex"]))
        assert Path(exact).parent.is_relative_to(here), exact
        assert entry["path"] == source_name(exact)
    assert exact_config(manifest)["source_path"] == str(here / "campaign.toml")
    assert manifest["config"]["source_path"] == source_name(str(here / "campaign.toml"))
    report = verify_run(out)
    assert report.ok, report.problems
    assert report.checked["lineage key"] == 1
    assert not any("no longer there" in note for note in report.notes), report.notes
    # what an object-store verify protects from its clean-up: the files at their bytes
    named = set(read_paths(out, None) or [])
    assert {here / "campaign.toml", here / "documents.jsonl", here / "sanitize.toml"} <= named
    assert here / "schemas" / "pairwise-v2.schema.json" in named


@pytest.mark.parametrize("changed", [*_PINNED, "schemas/pairwise-v2.schema.json", "campaign.toml"])
def test_a_changed_file_under_a_directory_whose_name_is_not_utf8_fails_naming_it(
    not_utf8: tuple[Path, Path], changed: str
) -> None:
    here, out = not_utf8
    named = source_name(str(here / changed))
    with _changed(here / changed):
        problems = _fails(out)
    assert any(named in p and "changed since the run" in p for p in problems), problems


def test_a_pinned_file_the_config_does_not_name_is_found_by_its_exact_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sanitization policy rowgate ships, where rowgate is installed under a directory
    whose name is not UTF-8: the manifest names it only in its ``sanitize`` block, in its
    lineage form, so verify finds it by its ``pinned`` entry's ``path_hex`` alone."""
    from pipeline.sanitize import sanitizer

    install = tmp_path / os.fsdecode(b"inst\xe9")
    install.mkdir()
    policy = install / DEFAULT_POLICY.name
    shutil.copy(DEFAULT_POLICY, policy)
    monkeypatch.setattr(sanitizer, "DEFAULT_POLICY", policy)
    config = CampaignConfig(inputs=(InputSpec(str(DATA / "math-reasoning-v1.jsonl")),))
    out = tmp_path / "out"
    run(config.override(**{"engine.workers": 1, "sanitize.enabled": True}), out)
    (entry,) = json.loads((out / "manifest.json").read_text())["pinned"]
    assert os.fsdecode(bytes.fromhex(entry["path_hex"])) == str(policy)
    report = verify_run(out)
    assert report.ok, report.problems
    with _changed(policy):
        problems = _fails(out)
    label = f"sanitize policy sanitize ({source_name(str(policy))}): changed since the run"
    assert any(label in p for p in problems), problems


def test_a_utf8_runs_manifest_holds_no_exact_bytes(pristine: Path) -> None:
    """``path_hex`` and ``config_hex`` appear only where a path is not UTF-8: the
    manifest of any other run reads as it did before they existed."""
    manifest = json.loads((pristine / "manifest.json").read_text())
    assert "config_hex" not in manifest
    assert manifest["pinned"]
    for entry in [*manifest["pinned"], *manifest["schemas"].values()]:
        assert "path_hex" not in entry, entry


def _reseal(out: Path, relative: str) -> None:
    """Rewrite the manifest's entry for ``relative`` (digest, size, rows) and its counts
    so that they agree with the file as it now is: a forger's careful edit."""
    path = out / relative
    rows = pq.ParquetFile(path).metadata.num_rows

    def change(m: Manifest) -> None:
        entry = next(e for e in m["outputs"] if e["path"] == relative)
        delta = rows - entry["rows"]
        entry.update(rows=rows, bytes=path.stat().st_size, sha256=file_sha256(path))
        m["counts"]["by_disposition"][entry["disposition"]] += delta
        m["conservation"]["rows_written"] += delta
        m["conservation"]["ok"] = m["conservation"]["rows_written"] == m["counts"]["lines"]

    _edit(out, change)


def _twice(table: pa.Table) -> pa.Table:
    return pa.concat_tables([table.slice(0, 1), table])


@pytest.mark.parametrize(
    ("rewrite", "expected"),
    [(lambda t: t.slice(1), "in no output row"), (_twice, "more than one output row")],
    ids=["dropped", "twice"],
)
def test_a_resealed_output_with_a_row_dropped_or_doubled_fails(
    out: Path, rewrite: Callable[[pa.Table], pa.Table], expected: str
) -> None:
    relative = sorted(out.rglob("rejected/*.parquet"))[0].relative_to(out).as_posix()
    table = pq.read_table(out / relative)
    pq.write_table(rewrite(table), out / relative, compression="zstd")
    _reseal(out, relative)
    _fails(out, expected)


def test_a_resealed_output_naming_another_content_profile_fails(out: Path) -> None:
    """``_content_profile`` is recomputed with the fingerprint, not trusted."""
    relative = sorted(out.rglob("accepted/pairwise-v2/*.parquet"))[0].relative_to(out).as_posix()
    table = pq.read_table(out / relative)
    column = table.schema.get_field_index("_content_profile")
    forged = pa.array(["rowgate:forged:v1"] * table.num_rows, table.schema.field(column).type)
    pq.write_table(
        table.set_column(column, "_content_profile", forged), out / relative, compression="zstd"
    )
    _reseal(out, relative)
    _fails(out, "_content_profile")


@pytest.mark.parametrize("forged", [None, "rowgate-sanitizer/0"])
@pytest.mark.parametrize("directory", ["accepted/pairwise-v2", "rejected"])
def test_a_resealed_output_naming_another_sanitizer_fails(
    out: Path, directory: str, forged: str | None
) -> None:
    """``_sanitizer`` is re-derived from the manifest's sanitizer version, not trusted."""
    relative = sorted(out.rglob(f"{directory}/*.parquet"))[0].relative_to(out).as_posix()
    table = pq.read_table(out / relative)
    column = table.schema.get_field_index("_sanitizer")
    assert table["_sanitizer"].null_count == 0  # the campaign sanitizes
    values = pa.array([forged] * table.num_rows, table.schema.field(column).type)
    pq.write_table(
        table.set_column(column, "_sanitizer", values), out / relative, compression="zstd"
    )
    _reseal(out, relative)
    _fails(out, "_sanitizer")


@pytest.mark.parametrize("codec", ["lz4", "snappy", "gzip", "none"])
def test_every_codec_verifies(tmp_path: Path, codec: str) -> None:
    """The compression check knows each codec's names in Parquet metadata."""
    from pipeline.core.config import CampaignConfig, InputSpec

    config = CampaignConfig(
        inputs=(InputSpec(str(DATA / "math-reasoning-v1.jsonl"), "math-reasoning-v1"),)
    ).override(**{"engine.workers": 1, "output.compression": codec})
    run(config, tmp_path / "out")
    report = verify_run(tmp_path / "out")
    assert report.ok, report.problems


def test_lineage_holds_only_the_files_of_the_current_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bounded memory on large outputs: the lineage walk opens a file when the input's
    lines reach its first row and drops it when it is read, so it never holds more than
    about one shard's files, however many the run wrote."""
    import pipeline.output.verify as verify
    from pipeline.core.config import CampaignConfig, InputSpec

    config = CampaignConfig(
        inputs=(InputSpec(str(DATA / "pairwise-v2.jsonl"), "pairwise-v2"),)
    ).override(**{"engine.workers": 1, "engine.shard_bytes": 4096})
    run(config, tmp_path / "out")
    alive, most = 0, 0

    class Counted(verify._FileRows):
        def __init__(self, path: Path, source: str, lowest: int = -(2**63)) -> None:
            nonlocal alive, most
            super().__init__(path, source, lowest)
            alive += 1
            most = max(most, alive)

        def _next(self) -> pa.Table | None:
            nonlocal alive
            table = super()._next()
            alive -= table is None
            return table

    monkeypatch.setattr(verify, "_FileRows", Counted)
    monkeypatch.setattr(verify, "_WINDOW_LINES", 4)  # windows far smaller than a shard
    report = verify_run(tmp_path / "out")
    assert report.ok, report.problems
    files = len(list((tmp_path / "out").rglob("part-*.parquet")))
    assert files > 40
    assert most <= 8, (most, files)


def test_a_resealed_rejected_output_with_its_raw_bytes_dropped_fails(out: Path) -> None:
    """A null ``_raw`` is accepted only where a reason says why (a line too large to
    hold, bytes withheld for a secret): nulling the rest loses the bytes a person needs
    to repair the line, and verify used to accept it."""
    relative = sorted(out.rglob("rejected/*.parquet"))[0].relative_to(out).as_posix()
    table = pq.read_table(out / relative)
    column = table.schema.get_field_index("_raw")
    assert table["_raw"].null_count < table.num_rows  # some rows hold their bytes
    nulls = pa.nulls(table.num_rows, table.schema.field(column).type)
    pq.write_table(table.set_column(column, "_raw", nulls), out / relative, compression="zstd")
    _reseal(out, relative)
    _fails(out, "_raw is null, but no reason says why")


@pytest.mark.parametrize("reason", ["line.too_large", "pii.raw_withheld"])
def test_a_dropped_raw_with_a_reason_that_is_not_true_fails(tmp_path: Path, reason: str) -> None:
    """A null ``_raw`` beside a reason saying why passed whatever the line: a short line
    said to be too large, or a secret withheld in a run that does not sanitize."""
    (tmp_path / "in.jsonl").write_bytes(
        b'{"short": 1}\n' + (DATA / "pairwise-v2.jsonl").read_bytes()
    )
    config = CampaignConfig(inputs=(InputSpec(str(tmp_path / "in.jsonl"), "pairwise-v2"),))
    out = tmp_path / "out"
    run(config.override(**{"engine.workers": 1}), out)
    relative = next(out.glob("rejected/*.parquet")).relative_to(out).as_posix()
    table = pq.read_table(out / relative)
    rows = table.to_pylist()
    first = next(r for r in rows if r["_line"] == 1)
    old = first["_reasons"][0]["code"]
    first["_raw"] = None
    first["_reasons"] = [{"code": reason, "path": "", "detail": "forged"}]
    pq.write_table(
        pa.Table.from_pylist(rows, schema=table.schema), out / relative, compression="zstd"
    )
    _reseal(out, relative)

    def recount(m: Manifest) -> None:
        rejected = m["counts"]["by_reason"]["rejected"]
        rejected[old] -= 1
        rejected[reason] = rejected.get(reason, 0) + 1
        if not rejected[old]:
            del rejected[old]

    _edit(out, recount)
    expected = (
        "withhold _raw as line.too_large, but the line is within the limit (first: line 1)"
        if reason == "line.too_large"
        else "in.jsonl:1: _raw is null, but no reason says why"
    )
    assert _fails(out, expected)


def _with_column(table: pa.Table) -> pa.Table:
    return table.append_column("injected", pa.array(["anything"] * table.num_rows))


def _retyped(table: pa.Table) -> pa.Table:
    """``_source`` as a large string: the same values, another Arrow type."""
    at = table.schema.get_field_index("_source")
    return table.set_column(at, "_source", table["_source"].cast(pa.large_string()))


def _nullable(table: pa.Table) -> pa.Table:
    """``_line`` nullable (a run writes it not null): the same values."""
    at = table.schema.get_field_index("_line")
    return table.cast(table.schema.set(at, pa.field("_line", pa.int64())))


def _reordered(table: pa.Table) -> pa.Table:
    return table.select([*table.column_names[1:], table.column_names[0]])


def _described(table: pa.Table) -> pa.Table:
    return table.replace_schema_metadata({"note": "added"})


@pytest.mark.parametrize(
    ("rewrite", "expected"),
    [
        (_with_column, "column(s) 'injected', which a run does not write there"),
        (lambda t: t.drop_columns(["_content_profile"]), "no column(s) '_content_profile'"),
        (_retyped, "column '_source' of type large_string, where a run writes string"),
        (_nullable, "column '_line' nullable"),
        (_reordered, "its columns in another order"),
        (_described, "key-value metadata a run does not write"),
    ],
    ids=["added", "dropped", "retyped", "nullable", "reordered", "metadata"],
)
@pytest.mark.parametrize("directory", ["accepted/pairwise-v2", "rejected"])
def test_a_resealed_part_whose_schema_is_not_the_runs_fails(
    out: Path, directory: str, rewrite: Callable[[pa.Table], pa.Table], expected: str
) -> None:
    """Each part's Arrow schema is the one a run writes for its disposition and kind:
    rows are decoded from the layout's columns alone, so an added column or key-value
    metadata passed, and a part with other types made verify blame the manifest."""
    relative = sorted(out.rglob(f"{directory}/*.parquet"))[0].relative_to(out).as_posix()
    pq.write_table(rewrite(pq.read_table(out / relative)), out / relative, compression="zstd")
    _reseal(out, relative)
    problems = _fails(out, f"{relative}: {expected}")
    assert len(problems) == 1, problems  # its rows still count: no conservation noise


@pytest.mark.parametrize("library", ["rowgate", "pyarrow"])
def test_part_schemas_of_a_run_by_another_writer_are_not_compared(out: Path, library: str) -> None:
    """Another rowgate (or pyarrow) may write other columns: a run it made gets a note,
    not a failure for every part, and every part's digest is still checked."""
    relative = sorted(out.rglob("accepted/pairwise-v2/*.parquet"))[0].relative_to(out).as_posix()
    table = pq.read_table(out / relative)
    added = table.append_column("added", pa.array([1] * table.num_rows))
    pq.write_table(added, out / relative, compression="zstd")
    _reseal(out, relative)
    _edit(out, lambda m: m["versions"].update({library: "0.0.1"}))
    report = verify_run(out)
    assert report.ok, report.problems
    assert any("part schemas not compared" in n and library in n for n in report.notes)
    (out / relative).write_bytes((out / relative).read_bytes() + b"\n")
    assert not verify_run(out).ok  # the digest still holds the part


def test_a_part_rewritten_by_another_writer_fails_naming_it(out: Path) -> None:
    """polars writes the same rows with other Arrow types (large strings, no not-null):
    a mismatch naming the part (exit 1), never a manifest that "mangles a field" (exit 3)."""
    import polars as pl

    relative = sorted(out.rglob("rejected/*.parquet"))[0].relative_to(out).as_posix()
    pl.read_parquet(out / relative).write_parquet(out / relative)
    _reseal(out, relative)
    _fails(out, f"{relative}: column '_source' of type large_string")


def test_a_part_whose_rows_cannot_be_read_fails_naming_it(out: Path) -> None:
    """A part whose footer reads but whose pages do not (zeroed, resealed) is a problem
    naming that part; verify used to report it as a mangled manifest."""
    relative = sorted(out.rglob("accepted/pairwise-v2/*.parquet"))[0].relative_to(out).as_posix()
    chunk = pq.ParquetFile(out / relative).metadata.row_group(0).column(0)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray((out / relative).read_bytes())
    data[start : start + chunk.total_compressed_size] = bytes(chunk.total_compressed_size)
    (out / relative).write_bytes(bytes(data))
    _reseal(out, relative)
    _fails(out, f"{relative}: its rows cannot be read or decoded")


def _point_elsewhere(table: pa.Table, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The first removed row's pointer moved to a line past the input's end."""
    return rows[0] | {"_line": 10**6}


def _point_at_itself(table: pa.Table, rows: list[dict[str, Any]]) -> dict[str, Any]:
    itself = table.slice(0, 1).to_pylist()[0]
    return {key: itself[key] for key in ("_source", "_line", "_record_sha256")}


def _point_with_another_digest(table: pa.Table, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return rows[0] | {"_record_sha256": "0" * 64}


@pytest.mark.parametrize(
    ("forge", "expected"),
    [
        (_point_elsewhere, "a row no output holds"),
        (_point_at_itself, "a row no output holds"),
        (_point_with_another_digest, "names this row with another _record_sha256"),
    ],
    ids=["past-the-end", "itself", "another-digest"],
)
def test_a_resealed_duplicate_pointing_at_no_kept_row_fails(
    out: Path, forge: Callable[[pa.Table, list[dict[str, Any]]], dict[str, Any]], expected: str
) -> None:
    """``_duplicate_of`` names the kept row (DESIGN §3.6): verify used to accept one
    naming a line no output holds, the removed row itself, or a row with another digest."""
    relative = sorted(out.rglob("duplicates/*/*.parquet"))[0].relative_to(out).as_posix()
    table = pq.read_table(out / relative)
    assert table.num_rows >= 2
    column = table.schema.get_field_index("_duplicate_of")
    pointers = table["_duplicate_of"].to_pylist()
    pointers[0] = forge(table, pointers)
    forged = pa.array(pointers, table.schema.field(column).type)
    pq.write_table(
        table.set_column(column, "_duplicate_of", forged), out / relative, compression="zstd"
    )
    _reseal(out, relative)
    _fails(out, expected)


def test_a_retry_of_a_row_that_dedupe_removed_verifies(tmp_path: Path) -> None:
    """A retry names its original (``cross.retry``), which dedupe may then remove as a
    duplicate of an earlier row: the chain is the run's own, and verify accepts it (the
    pointer check first required a kept row outside duplicates/)."""
    line = next(iter(export_lines("pairwise-v2", 20, seed=3, size=1, defect_rate=0)))
    record = orjson.loads(line)
    first, replayed = dict(record, task_id="task-c"), dict(record, task_id="task-a")
    data = tmp_path / "chain.jsonl"
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in (first, replayed, replayed)))
    out = tmp_path / "out"
    run(CampaignConfig(inputs=(InputSpec(str(data), "pairwise-v2"),)), out)
    removed = pq.read_table(out / "duplicates" / "pairwise-v2").to_pylist()
    assert [(r["_line"], r["_dedupe_rule"], r["_duplicate_of"]["_line"]) for r in removed] == [
        (2, "exact", 1),
        (3, "retry", 2),
    ]
    report = verify_run(out)
    assert report.ok, report.problems


def test_duplicate_pointers_never_use_the_recorded_input_index(out: Path) -> None:
    """The pointers are keyed by an input's position in the manifest: a recorded index
    beyond 64 bits was an internal error (OverflowError)."""
    _edit(out, lambda m: m["inputs"][0].update(index=2**70))
    verify_run(out)


def _edit_the_page(out: Path) -> None:
    page = out / "report.html"
    page.write_text(page.read_text("utf-8").replace("conservation ok", "conservation OK"), "utf-8")


def _rename_the_campaign(out: Path) -> None:
    _edit(out, _set("campaign", value="another"))


def _relabel_an_input(out: Path) -> None:
    _edit(out, lambda m: m["inputs"][0].update(split="eval"))


def _drop_the_page(out: Path) -> None:
    (out / "report.html").unlink()
    _edit(out, _set("reports", value=[]))


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (_edit_the_page, "not the page the manifest and the outputs render"),
        (_rename_the_campaign, "not the page the manifest and the outputs render"),
        (_relabel_an_input, "not the page the manifest and the outputs render"),
        (_drop_the_page, "the manifest lists none"),
    ],
    ids=["page-edited", "campaign", "input-split", "page-dropped"],
)
def test_report_html_is_rendered_again(
    out: Path, tamper: Callable[[Path], None], expected: str
) -> None:
    """verify (the command, the API) renders report.html again: an edited page resealed
    with its digest, a deleted one, or a manifest field only the page shows used to pass."""
    import pipeline
    from pipeline.reports.run_report import RUN_REPORT_NAME

    assert pipeline.verify_run(out).ok
    tamper(out)
    if (out / RUN_REPORT_NAME).exists():
        page = out / RUN_REPORT_NAME
        _edit(
            out,
            lambda m: m["reports"][0].update(bytes=page.stat().st_size, sha256=file_sha256(page)),
        )
    report = pipeline.verify_run(out)
    assert not report.ok
    assert any(expected in p for p in report.problems), report.problems


@pytest.mark.parametrize("claimed", ["gzip", "zstd"])
def test_an_input_compression_edited_in_the_manifest_is_a_mismatch(out: Path, claimed: str) -> None:
    """verify read the input as the manifest said: a plain export then failed as a corrupt
    stream (exit 3, blaming the input) instead of a mismatch naming the manifest."""
    _edit(out, lambda m: m["inputs"][0].update(compression=claimed))
    _fails(out, f"compression 'none' by its bytes, the manifest says {claimed!r}")


def test_report_html_made_by_other_versions_is_not_rendered_again(out: Path) -> None:
    """Another rowgate (or polars, matplotlib, ...) may render the same run otherwise:
    verify then says it did not compare the page, and still checks its digest."""
    import pipeline

    _edit(out, lambda m: m["versions"].update(rowgate="0.0.1"))
    report = pipeline.verify_run(out)
    assert report.ok, report.problems
    assert any("report.html not rendered again" in n and "rowgate" in n for n in report.notes)
    _edit_the_page(out)
    assert not pipeline.verify_run(out).ok  # the digest still holds the page


@pytest.mark.parametrize(
    ("setting", "value"),
    [("max_decompressed_bytes", -1), ("max_expansion_ratio", 0), ("max_expansion_ratio", 10**9)],
)
def test_a_decompression_bound_no_run_could_have_is_a_mismatch(
    out: Path, setting: str, value: Any
) -> None:
    """A limit edited into the manifest out of its bounds: verify read the compressed
    inputs under it and stopped with exit 3, calling an input a decompression bomb. Now
    the edit is a problem, and the inputs are read under the default."""
    _edit(out, _set("config", "limits", setting, value=value))
    report = verify_run(out)
    assert any(f"limits.{setting}" in p for p in report.problems), report.problems
    assert report.checked["lines"] > 0  # every input was still read


def test_a_changed_compressed_input_is_a_mismatch_beside_the_others(tmp_path: Path) -> None:
    """A gzip input truncated after the run stopped verify with exit 3 (an input error)
    on its first read, and the other mismatches went unreported."""
    lines = b"".join((DATA / "pairwise-v2.jsonl").read_bytes().splitlines(keepends=True)[:20])
    (tmp_path / "in.jsonl.gz").write_bytes(gzip.compress(lines))
    config = CampaignConfig(inputs=(InputSpec(str(tmp_path / "in.jsonl.gz"), "pairwise-v2"),))
    out = tmp_path / "out"
    run(config.override(**{"engine.workers": 1}), out)
    data = (tmp_path / "in.jsonl.gz").read_bytes()
    (tmp_path / "in.jsonl.gz").write_bytes(data[: len(data) // 2])
    (out / "report.html").write_bytes(b"edited")
    _fails(
        out,
        "in.jsonl.gz: bytes differ",
        "in.jsonl.gz: cannot be read as the run read it",
        "report.html: bytes differ",
    )


@pytest.mark.parametrize("given", ["absolute", "not utf-8"])
def test_sources_finds_moved_inputs(tmp_path: Path, given: str) -> None:
    """Under --sources, an input given by an absolute path was looked up at that path
    (``DIR / "/abs"`` is ``/abs``), and a name that is not UTF-8 by its lineage form."""
    lines = b"".join((DATA / "pairwise-v2.jsonl").read_bytes().splitlines(keepends=True)[:3])
    source = tmp_path / "d"
    source.mkdir()
    name = os.fsdecode(b"a\xffb.jsonl") if given == "not utf-8" else "x.jsonl"
    (source / name).write_bytes(lines)
    spec = str(source / name) if given == "absolute" else str(source)
    out = tmp_path / "out"
    run(
        CampaignConfig(inputs=(InputSpec(spec, "pairwise-v2"),)).override(**{"engine.workers": 1}),
        out,
    )
    moved = tmp_path / "moved"
    moved.mkdir()
    source.rename(moved / "d")
    report = verify_run(out, moved / "d")
    assert report.ok, report.problems


def test_sources_tells_absolute_inputs_of_one_name_apart(tmp_path: Path) -> None:
    """Two absolute inputs named x.jsonl were both looked up at DIR/x.jsonl."""
    lines = (DATA / "pairwise-v2.jsonl").read_bytes().splitlines(keepends=True)
    specs = []
    for name, rows in (("a", lines[:3]), ("b", lines[3:5])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.jsonl").write_bytes(b"".join(rows))
        specs.append(InputSpec(str(tmp_path / name / "x.jsonl"), "pairwise-v2"))
    out = tmp_path / "out"
    run(CampaignConfig(inputs=tuple(specs)).override(**{"engine.workers": 1}), out)
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("a", "b"):
        (tmp_path / name).rename(moved / name)
    report = verify_run(out, moved)
    assert report.ok, report.problems


def _sanitized_run(tmp_path: Path) -> Path:
    """A sanitizing run of three math rows: one redacted, one clean, one rejected."""
    row = {"assumptions": [], "derivation": ["s"], "final_answer": "1", "reasoning_score": 3}
    rows = [
        {"task_id": "m-1", "problem": "Mail alice.smith@gmail.com for the proof.", **row},
        {"task_id": "m-2", "problem": "Add one and one.", **row},
        {"task_id": "m-3", "problem": "Add two and two.", "extra": 1, **row},
    ]
    tmp_path.mkdir()
    (tmp_path / "in.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    config = CampaignConfig(inputs=(InputSpec(str(tmp_path / "in.jsonl"), "math-reasoning-v1"),))
    out = tmp_path / "out"
    run(config.override(**{"engine.workers": 1, "sanitize.enabled": True}), out)
    assert verify_run(out).ok
    return out


def _rewrite(out: Path, pattern: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the first row of the part matching ``pattern`` and reseal the run."""
    part = next(out.glob(pattern))
    table = pq.read_table(part)
    rows = table.to_pylist()
    change(rows[0])
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), part, compression="zstd")
    _reseal(out, part.relative_to(out).as_posix())


def test_a_sanitized_runs_rows_are_what_its_lines_gate_to(tmp_path: Path) -> None:
    """In a sanitizing run a stored record was not tied to its line (a redaction undone,
    digests recomputed, passed), a rejected row's ``_kind`` and ``_schema_sha256`` were
    never checked, and a ``pii.raw_withheld`` beside the dropped bytes of a line holding
    no secret passed (found by the sanitization red team). Each line is gated again."""
    from pipeline.kinds import KINDS
    from pipeline.output.manifest import load_manifest
    from pipeline.output.verify import VerifyReport, _schemas
    from pipeline.records.canonical import canonical_json

    out = _sanitized_run(tmp_path / "undone")
    layout, _ = _schemas(load_manifest(out), VerifyReport())["math-reasoning-v1"]

    def undo(row: dict[str, Any]) -> None:
        row["problem"] = "Mail alice.smith@gmail.com for the proof."
        record = layout.decode_row(row)
        row["_record_sha256"] = hashlib.sha256(canonical_json(record)).hexdigest()
        row["_content_sha256"], row["_content_profile"] = KINDS[
            "math-reasoning-v1"
        ].fingerprint_and_profile(record)

    _rewrite(out, "accepted/*/part-*.parquet", undo)
    _fails(out, "in.jsonl:1: the row's record is not the record its line holds")
    # a version edited in the manifest is no reason to check less (the review's forgery)
    _edit(out, lambda m: m["versions"].update(orjson="0.0.1"))
    _fails(out, "in.jsonl:1: the row's record is not the record its line holds")
    assert any("other versions of orjson" in note for note in verify_run(out).notes)
    _edit(out, lambda m: m["sanitize"].update(sanitizer_version="rowgate-sanitizer/1"))
    assert any("sanitizer is rowgate-sanitizer/1" in note for note in verify_run(out).notes)

    out = _sanitized_run(tmp_path / "kind")
    _rewrite(out, "rejected/part-*.parquet", lambda row: row.update(_kind="agent-trace-v1"))
    _fails(out, "in.jsonl:3: the row's _kind or _schema_sha256 is not what the gate gives")

    out = _sanitized_run(tmp_path / "withheld")
    forged = {"code": "pii.raw_withheld", "path": "", "detail": "forged"}
    _rewrite(
        out,
        "rejected/part-*.parquet",
        lambda row: row.update(_raw=None, _reasons=[*row["_reasons"], forged]),
    )
    _edit(out, lambda m: m["counts"]["by_reason"]["rejected"].update({"pii.raw_withheld": 1}))
    _fails(out, "in.jsonl:3: the row's _raw is null though the line holds no secret")


def test_a_rubric_recorded_at_another_installs_path_is_re_hashed_here(out: Path) -> None:
    """A run scored with a rubric rowgate ships records its path in the install that made
    it: verified by another install or checkout, it was 'the manifest records no digest
    for it'. It is matched by role and name, re-hashed here, and named in a note."""

    def moved(m: Manifest) -> None:
        for entry in m["pinned"]:
            if entry["role"] in ("rubric", "rubric_format"):
                entry["path"] = "/another/install/rubrics/" + Path(entry["path"]).name

    _edit(out, moved)
    report = verify_run(out)
    assert report.ok, report.problems
    assert sum("recorded at /another/install/rubrics/" in n for n in report.notes) == 2
    _edit(
        out, lambda m: next(e for e in m["pinned"] if e["role"] == "rubric").update(sha256="0" * 64)
    )
    _fails(out, "the run's pin or loaded digest differs from the one recorded")


@pytest.fixture(scope="module")
def sharded(campaign: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The campaign's run with its inputs cut into many shards, so that verify walks
    each input a shard at a time (:func:`pipeline.output.verify._shard_walks`)."""
    out = tmp_path_factory.mktemp("sharded") / "out"
    config = load_campaign(campaign / "campaign.toml").override(
        **{"engine.workers": 1, "engine.shard_bytes": 16384}
    )
    run(config, out)
    return out


def _part_of(out: Path, kind: str, number: int) -> str:
    return sorted(out.rglob(f"accepted/{kind}/*.parquet"))[number].relative_to(out).as_posix()


def _drop_a_middle_row(out: Path) -> None:
    relative = _part_of(out, "pairwise-v2", 1)
    table = pq.read_table(out / relative)
    pq.write_table(table.slice(1), out / relative, compression="zstd")
    _reseal(out, relative)


def _copy_a_row_into_another_shards_part(out: Path) -> None:
    source, target = _part_of(out, "pairwise-v2", 0), _part_of(out, "pairwise-v2", 2)
    row = pq.read_table(out / source).slice(0, 1)
    table = pq.read_table(out / target)
    pq.write_table(pa.concat_tables([row, table]), out / target, compression="zstd")
    _reseal(out, target)


def _change_a_fingerprint(out: Path) -> None:
    relative = _part_of(out, "grounded-qa-v1", 1)
    table = pq.read_table(out / relative)
    column = table.schema.get_field_index("_content_sha256")
    forged = pa.array(["0" * 64, *table["_content_sha256"].to_pylist()[1:]])
    pq.write_table(table.set_column(column, "_content_sha256", forged), out / relative)
    _reseal(out, relative)


def _shift_a_line_base(out: Path) -> None:
    def change(m: Manifest) -> None:
        m["shards"][2]["line_base"] += 1

    _edit(out, change)


def _move_a_row_across_a_boundary(out: Path) -> None:
    """The last row of the third part (the third shard's lines) moved to the start of the
    second: a file out of line order across a shard boundary."""
    second, third = _part_of(out, "pairwise-v2", 1), _part_of(out, "pairwise-v2", 2)
    table = pq.read_table(out / third)
    moved = table.slice(table.num_rows - 1)
    pq.write_table(table.slice(0, table.num_rows - 1), out / third, compression="zstd")
    rows = pq.read_table(out / second)
    pq.write_table(pa.concat_tables([moved, rows]), out / second, compression="zstd")
    _reseal(out, second)
    _reseal(out, third)


def _a_float_line_base(out: Path) -> None:
    def change(m: Manifest) -> None:
        m["shards"][2]["line_base"] = float(m["shards"][2]["line_base"])

    _edit(out, change)


@pytest.mark.parametrize(
    ("tamper", "passes"),
    [
        (None, True),
        (_drop_a_middle_row, False),
        (_copy_a_row_into_another_shards_part, False),
        (_change_a_fingerprint, False),
        (_move_a_row_across_a_boundary, False),
        (_a_float_line_base, True),  # the shards are a statement about the run: walked whole
        ("appended", False),
    ],
    ids=[
        "untouched",
        "a row dropped",
        "a row copied into another shard's part",
        "a fingerprint",
        "a row moved across a shard boundary",
        "a float line base",
        "lines appended to the input",
    ],
)
def test_verify_finds_the_same_a_shard_at_a_time_with_any_worker_count(
    sharded: Path,
    campaign: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tamper: Any,
    passes: bool,
) -> None:
    """verify walks an input a shard of the run at a time, on several processes: what it
    finds is what one process walking each input whole finds, problem for problem."""
    import pipeline.output.verify as verify

    out = tmp_path / "out"
    shutil.copytree(sharded, out)
    sources = None
    if tamper == "appended":  # the input as it is now, looked up with --sources
        sources = tmp_path / "sources"
        sources.mkdir()
        for name in ("pairwise-v2.jsonl", "grounded-qa-v1.jsonl"):
            shutil.copy(campaign / name, sources / name)
        with (sources / "pairwise-v2.jsonl").open("ab") as fh:
            fh.write((campaign / "pairwise-v2.jsonl").read_bytes().splitlines(True)[3])
    elif tamper is not None:
        tamper(out)
    found = [verify_run(out, sources, workers=n) for n in (1, 2)]
    manifest = json.loads((out / "manifest.json").read_text())
    assert len([s for s in manifest["shards"] if s["input"] == 0]) > 3
    monkeypatch.setattr(
        verify,
        "_shard_walks",
        lambda m, entry, source, files: [verify._InputLineage(entry, source, files)],
    )
    whole = verify_run(out, sources, workers=1)
    stopped = any("not in line order" in p for p in whole.problems)
    for report in found:
        assert (report.problems, report.notes) == (whole.problems, whole.notes)
        if stopped:  # a walk that stops counts the lines it read, windowed otherwise
            report.checked.pop("lines", None), whole.checked.pop("lines", None)
        assert report.checked == whole.checked
    assert whole.ok == passes, whole.problems


def test_a_shard_line_base_edited_in_the_manifest_fails(sharded: Path, tmp_path: Path) -> None:
    """The line bases of the run's shards number the lines verify reads a shard at a
    time: a base that is not the count of the lines before it is a mismatch."""
    out = tmp_path / "out"
    shutil.copytree(sharded, out)
    _shift_a_line_base(out)
    problems = _fails(out, "the manifest's shard starting at byte")
    assert any("follows line" in p for p in problems)


def test_a_small_run_is_verified_in_one_process(pristine: Path) -> None:
    """Starting a worker costs about half a second: one is started per 64 MB of inputs
    and outputs at most, and no more than the cores a run would use."""
    from pipeline.core.config import EngineSettings
    from pipeline.output.verify import verify_workers

    manifest = json.loads((pristine / "manifest.json").read_text())
    assert verify_workers(manifest, [], pristine) == 1
    big = {**manifest, "inputs": [{"bytes": 10 * (64 << 20)}]}
    assert verify_workers(big, [], pristine) == EngineSettings().resolved_workers(10)
