"""``rowgate rubrics``: ``check`` validates an ARI rubric envelope; ``score`` aggregates
leaf grades over its tree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from pipeline.cli._common import EXIT_MISMATCH, err, library_errors, out, styled, terminal_text
from pipeline.core.config import CampaignConfig, load_campaign
from pipeline.output.outdir import atomic_file

if TYPE_CHECKING:
    import polars as pl

app = typer.Typer(help="ARI rubric envelopes: validation and tree scoring.", no_args_is_help=True)


@app.command("check")
def check_command(
    file: Annotated[Path, typer.Argument(help="One envelope (a JSON document, any formatting).")],
    config_file: Annotated[
        Path | None, typer.Option("--config", "-c", help="Campaign config (TOML).")
    ] = None,
) -> None:
    """Validate one envelope: strict JSON, the schema its `schema_version`/`version` names,
    rubric_sha256, node ids, leaf-only fields, weights, flagged-leaf share. Exit 0 when valid
    (warnings allowed), 1 otherwise."""
    # lazy: the gate and its libraries (pyarrow) load only when this command runs
    from pipeline.core.reasons import Disposition
    from pipeline.gate.envelope import check_envelope

    with library_errors():
        config = load_campaign(config_file) if config_file else CampaignConfig()
        outcome = check_envelope(file, config)
    verdict = "valid" if outcome.disposition is Disposition.ACCEPTED else "invalid"
    for reason in outcome.reasons:
        line = f"  {reason.code} {reason.path} {reason.detail}".rstrip()
        err.print(terminal_text(line), highlight=False)  # a path holds the document's keys
    out.print(f"{terminal_text(str(file))}: {verdict} ({outcome.kind or 'unrouted'})")
    if verdict != "valid":
        raise typer.Exit(EXIT_MISMATCH)


_LISTED = 20


@contextmanager
def _nodes_file(out_file: Path | None, force: bool, reads: list[Path]) -> Iterator[Path | None]:
    """Where to write every node's score: a temporary sibling that becomes ``out_file``
    once written (:func:`~pipeline.output.outdir.atomic_file`), checked before any work;
    never one of the files the command reads (``--out`` over its own grades replaced
    them), nor an existing file without ``--force``."""
    if out_file is None:
        yield None
        return
    if not out_file.name.endswith((".parquet", ".jsonl")):
        from pipeline.rubrics.tree import TreeError

        raise TreeError(f"{out_file}: --out must end in .parquet or .jsonl")
    with atomic_file(out_file, force=force, protect=reads) as tmp:
        yield tmp


def _write_nodes(nodes: pl.DataFrame, out_file: Path, tmp: Path) -> None:
    if out_file.name.endswith(".parquet"):
        nodes.write_parquet(tmp)
    else:
        nodes.write_ndjson(tmp)


@app.command("score")
def score_command(
    envelope: Annotated[
        Path, typer.Argument(help="ARI rubric envelope (JSON) with a `rubric` tree.")
    ],
    grades: Annotated[
        Path,
        typer.Argument(help="Leaf grades: JSONL or Parquet with submission, leaf_id, score (0/1)."),
    ],
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write every node's score (.parquet or .jsonl)."),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Replace an existing --out file (never an input).")
    ] = False,
) -> None:
    """Aggregate leaf grades to every node: score(node) = Σ wᵢ·score(childᵢ) / Σ wᵢ, with
    single-child chains collapsed. Missing grades are reported and leave the nodes above
    them without a score; they are never counted as 0."""
    # lazy: polars loads only when this command runs
    import polars as pl

    from pipeline.rubrics.tree import load_grades, read_envelope, score_tree

    with library_errors(), _nodes_file(out_file, force, [envelope, grades]) as tmp:
        tree = read_envelope(envelope)
        result = score_tree(tree, load_grades(grades))
        if out_file is not None and tmp is not None:
            _write_nodes(result.nodes, out_file, tmp)
    roots = result.nodes.filter(pl.col("parent_id").is_null())
    table = Table(
        "submission", "root score", "graded weight", "missing leaves", box=None,
        title=f"{len(tree.leaves)} leaves · {tree.nodes.height} nodes",
    )  # fmt: skip
    for row in roots.iter_rows(named=True):
        score = "—" if row["score"] is None else f"{row['score']:.4f}"
        table.add_row(
            _shown(row["submission"]),
            score,
            f"{row['graded_weight']:.4f}",
            str(row["missing_leaves"]),
        )
    out.print(table)
    if result.missing.height:
        err.print(
            styled(f"{result.missing.height} leaf grade(s) missing", "yellow"),
            "nodes above them have no score (missing is never 0):",
            sep="; ",
        )
        for row in result.missing.head(_LISTED).iter_rows(named=True):
            chain = row["chain"] or []
            names = " = ".join(map(_shown, chain)) if len(chain) > 1 else _shown(row["leaf_id"])
            err.print(f"  {_shown(row['submission'])}  {names}", highlight=False)
        if result.missing.height > _LISTED:
            err.print(f"  … {result.missing.height - _LISTED} more", highlight=False)


def _shown(text: str) -> str:
    """An id from the user's files as the terminal shows it: as it is, or as a JSON string
    when it holds a control character (an escape sequence cleared the screen or set the
    window title; a newline added rows to the table)."""
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)
