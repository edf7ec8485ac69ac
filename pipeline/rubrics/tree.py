"""ARI replication rubric trees: leaf grades in {0, 1} → a score for every node (seed 001).

Seed 001: ``score(node) = sum_over_children(w_i * score(child_i)) /
sum_over_children(w_i)``; leaves are graded 0 or 1 (SimpleJudge's binary verdict);
internal nodes are never graded directly, and single-child wrapper nodes are folded
into their child. The fold follows upstream ``_collapse_single_child_chains``
(ari-skill-replicate/src/generator.py): the collapsed node keeps the *top* node's id and
weight and adopts the bottom node's children. Its score is therefore the bottom node's
score whatever the inner weights (even 0), and the top weight is what its parent sees.
A grade may name a collapsed leaf by any id of its chain; every node of the original
tree is reported, a chain's members sharing their collapsed node's score.

Vectorised: the collapsed tree is flattened once into (node, leaf, effective weight)
rows, the effective weight being the product of ``w_child / Σ w_siblings`` along the
path from the node down to the leaf, so ``score(node) = Σ_leaf e(node, leaf) · grade``
is one join and one group-by over every submission and node at once.

Missing grades are reported, never read as 0: a node whose subtree misses the grade of
a leaf with positive effective weight has no score (null), and every missing
(submission, leaf) pair is listed. Malformed input fails with :class:`TreeError`; full
envelope validation (provenance digests, vocabularies) is ``rowgate rubrics check``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import polars as pl

from pipeline.core.config import Limits
from pipeline.core.files import read_regular, refuse_special
from pipeline.core.reasons import RejectLine
from pipeline.records.strict_json import parse_object
from pipeline.rubrics.model import RubricError

__all__ = [
    "RubricTree",
    "TreeError",
    "TreeScores",
    "load_grades",
    "parse_envelope",
    "read_envelope",
    "score_tree",
]

_MAX_DEPTH: Final = 512
_MAX_ITEMS: Final = 1_000_000


class TreeError(RubricError):
    """A rubric tree or a grades file that cannot be aggregated, with the reason."""


@dataclass(frozen=True)
class _Node:
    id: str
    weight: float
    children: tuple[_Node, ...]


@dataclass(frozen=True)
class RubricTree:
    """A parsed rubric tree, flattened for aggregation."""

    #: every original node: node_id, parent_id, depth, leaf, weight, collapsed_id
    nodes: pl.DataFrame
    #: the collapsed tree as (collapsed_id, leaf_id, weight): effective weights
    paths: pl.DataFrame
    #: any id of a collapsed leaf's chain → the collapsed leaf's id
    leaf_aliases: dict[str, str]

    @property
    def leaves(self) -> list[str]:
        return sorted(set(self.leaf_aliases.values()))


@dataclass(frozen=True)
class TreeScores:
    #: one row per (submission, original node): score (null when undefined),
    #: graded_weight (effective weight of graded leaves), leaves, missing_leaves
    nodes: pl.DataFrame
    #: (submission, leaf_id, chain) without a grade; ``chain`` lists every id that may
    #: name the leaf (its single-child chain, top first)
    missing: pl.DataFrame


def _node(value: Any, where: str, seen: set[str]) -> _Node:
    if not isinstance(value, dict):
        raise TreeError(f"{where}: a task node must be an object")
    node_id = value.get("id")
    if not isinstance(node_id, str) or not node_id:
        raise TreeError(f"{where}.id: a task node needs a non-empty string id")
    if node_id in seen:
        raise TreeError(f"{where}.id: id {node_id!r} is used by more than one node")
    seen.add(node_id)
    weight = value.get("weight")
    if (
        isinstance(weight, bool)
        or not isinstance(weight, int | float)
        or not math.isfinite(weight)
        or weight < 0
    ):
        raise TreeError(f"{where}.weight: node {node_id!r} needs a finite weight >= 0")
    children = value.get("sub_tasks")
    if children is None:
        children = []
    if not isinstance(children, list):
        raise TreeError(f"{where}.sub_tasks: node {node_id!r}: sub_tasks must be an array")
    return _Node(
        node_id,
        float(weight),
        tuple(_node(c, f"{where}.sub_tasks[{i}]", seen) for i, c in enumerate(children)),
    )


def _flatten(root: _Node) -> RubricTree:
    node_rows: list[tuple[str, str | None, int, bool, float, str]] = []
    path_rows: list[tuple[str, str, float, bool]] = []
    aliases: dict[str, str] = {}

    def visit(
        node: _Node, parent: str | None, depth: int, stack: list[tuple[str, float, bool]]
    ) -> None:
        # Fold the single-child chain below `node`: the top keeps its id and weight.
        chain = [node]
        while len(chain[-1].children) == 1:
            chain.append(chain[-1].children[0])
        top, bottom = chain[0], chain[-1]
        for n, member in enumerate(chain):
            node_rows.append(
                (
                    member.id,
                    parent if n == 0 else chain[n - 1].id,
                    depth + n,
                    not member.children,
                    member.weight,
                    top.id,
                )
            )
        # stack: (collapsed ancestor id, effective weight of the current node under it,
        # whether every weight on the way is above 0: a product of shares can underflow)
        stack = [*stack, (top.id, 1.0, True)]
        if not bottom.children:
            for member in chain:
                aliases[member.id] = top.id
            path_rows.extend(
                (ancestor, top.id, weight, counts) for ancestor, weight, counts in stack
            )
            return
        try:
            total = math.fsum(c.weight for c in bottom.children)
        except OverflowError:
            raise TreeError(
                f"node {bottom.id!r}: the weights of its children sum beyond the largest "
                "float; scale them down"
            ) from None
        if total <= 0:
            raise TreeError(
                f"node {bottom.id!r}: the weights of its children sum to 0, so its score "
                "is undefined"
            )
        for child in bottom.children:
            share = child.weight / total
            on = child.weight > 0
            visit(
                child,
                bottom.id,
                depth + len(chain),
                [(a, w * share, c and on) for a, w, c in stack],
            )

    visit(root, None, 0, [])
    nodes = pl.DataFrame(
        node_rows,
        schema={
            "node_id": pl.String,
            "parent_id": pl.String,
            "depth": pl.Int32,
            "leaf": pl.Boolean,
            "weight": pl.Float64,
            "collapsed_id": pl.String,
        },
        orient="row",
    )
    paths = pl.DataFrame(
        path_rows,
        schema={
            "collapsed_id": pl.String,
            "leaf_id": pl.String,
            "weight": pl.Float64,
            "counts": pl.Boolean,
        },
        orient="row",
    )
    return RubricTree(nodes, paths, aliases)


def parse_envelope(data: bytes) -> RubricTree:
    """Parse an ARI rubric envelope (strict JSON) and flatten its ``rubric`` tree."""
    try:
        envelope = parse_object(data, max_depth=_MAX_DEPTH, max_items=_MAX_ITEMS)
    except RejectLine as exc:
        raise TreeError(f"not strict JSON ({exc.reason.code}: {exc.reason.detail})") from None
    if "rubric" not in envelope:
        raise TreeError("$: an envelope needs a 'rubric' root task node")
    return _flatten(_node(envelope["rubric"], "$.rubric", set()))


def read_envelope(path: Path) -> RubricTree:
    data = read_regular(path, f"cannot read {path}", error=TreeError)
    try:
        return parse_envelope(data)
    except TreeError as exc:
        raise TreeError(f"{path}: {exc}") from None


_GRADES_SCHEMA: Final = {"submission": pl.String, "leaf_id": pl.String, "score": pl.Float64}


_LIMITS: Final = Limits()


def _grades_from_jsonl(path: Path) -> pl.DataFrame:
    rows = []
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            line = line.rstrip(b"\n")
            if not line.strip():
                continue
            try:
                # a grade line may carry more (a judge's notes): the gate's limits
                record = parse_object(line, _LIMITS.max_depth, _LIMITS.max_items)
            except RejectLine as exc:
                raise TreeError(f"{path}:{number}: not strict JSON ({exc.reason.code})") from None
            missing = [k for k in _GRADES_SCHEMA if k not in record]
            if missing:
                raise TreeError(f"{path}:{number}: missing {', '.join(missing)}")
            submission, leaf, score = record["submission"], record["leaf_id"], record["score"]
            if not isinstance(submission, str) or not isinstance(leaf, str):
                raise TreeError(f"{path}:{number}: submission and leaf_id must be strings")
            if score is not None and (
                isinstance(score, bool) or not isinstance(score, int | float)
            ):
                raise TreeError(f"{path}:{number}: score must be 0, 1 or null")
            rows.append((submission, leaf, None if score is None else float(score)))
    return pl.DataFrame(rows, schema=_GRADES_SCHEMA, orient="row")


def load_grades(path: Path) -> pl.DataFrame:
    """Leaf grades (``submission``, ``leaf_id``, ``score``) from JSONL or Parquet.

    A null score is a missing grade. Any score other than 0 or 1 is an error.
    """
    refuse_special(path, f"cannot read grades {path}", error=TreeError)
    if path.name.endswith(".parquet"):
        try:
            frame = pl.read_parquet(path, columns=list(_GRADES_SCHEMA), glob=False)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise TreeError(f"{path}: cannot read grades: {exc}") from None
        for name, dtype in _GRADES_SCHEMA.items():
            actual = frame.schema[name]
            if dtype == pl.Float64 and not (actual.is_numeric() or actual == pl.Null):
                raise TreeError(f"{path}: column score must be numeric, not {actual}")
            if dtype == pl.String and actual not in (pl.String, pl.Null):
                raise TreeError(f"{path}: column {name} must be a string, not {actual}")
        frame = frame.cast(_GRADES_SCHEMA)  # type: ignore[arg-type]
    else:
        try:
            frame = _grades_from_jsonl(path)
        except OSError as exc:
            raise TreeError(f"cannot read {path}: {exc.strerror}") from None
    if frame.select(
        pl.col("submission").is_null().any() | pl.col("leaf_id").is_null().any()
    ).item():
        raise TreeError(f"{path}: submission and leaf_id must not be null")
    bad = frame.filter(pl.col("score").is_not_null() & ~pl.col("score").is_in([0.0, 1.0]))
    if bad.height:
        raise TreeError(
            f"{path}: leaf scores must be 0 or 1 (SimpleJudge's binary verdict); "
            f"{bad.height} row(s) are not, e.g. leaf {bad['leaf_id'][0]!r}"
        )
    return frame


def score_tree(tree: RubricTree, grades: pl.DataFrame) -> TreeScores:
    """Aggregate leaf grades to every node of every graded submission."""
    aliases = pl.DataFrame(
        {"leaf_id": list(tree.leaf_aliases), "collapsed_leaf": list(tree.leaf_aliases.values())},
        schema={"leaf_id": pl.String, "collapsed_leaf": pl.String},
    )
    resolved = grades.join(aliases, on="leaf_id", how="left")
    unknown = resolved.filter(pl.col("collapsed_leaf").is_null())
    if unknown.height:
        known = set(tree.nodes["node_id"].to_list())
        leaf = unknown["leaf_id"][0]
        what = "an internal node, which is never graded" if leaf in known else "not in the rubric"
        raise TreeError(f"grade for {leaf!r}: {what} ({unknown.height} such row(s))")
    duplicated = resolved.filter(pl.struct("submission", "collapsed_leaf").is_duplicated())
    if duplicated.height:
        first = duplicated.row(0, named=True)
        raise TreeError(
            f"submission {first['submission']!r}: leaf {first['collapsed_leaf']!r} is graded "
            "more than once (directly or through its single-child chain)"
        )
    graded = resolved.select("submission", pl.col("collapsed_leaf").alias("leaf_id"), "score")
    submissions = graded.select("submission").unique(maintain_order=True)
    missing_grade = pl.col("score").is_null()
    full = submissions.join(tree.paths, how="cross").join(
        graded, on=["submission", "leaf_id"], how="left"
    )
    # A node's score is a weighted mean of its leaves' grades: between the least and the
    # greatest of those that count (a sum of rounded products left it a unit in the last
    # place outside them: 0.9999999999999999 for leaves all graded 1, 1.0000000000000002).
    counted = pl.col("score").filter(pl.col("counts"))
    by_node = full.group_by(["submission", "collapsed_id"], maintain_order=True).agg(
        score=pl.when((missing_grade & pl.col("counts")).any())
        .then(pl.lit(None, pl.Float64))
        .otherwise(
            (pl.col("weight") * pl.col("score").fill_null(0.0))
            .sum()
            .clip(counted.min(), counted.max())
        ),
        graded_weight=pl.col("weight").filter(~missing_grade).sum(),
        leaves=pl.len(),
        missing_leaves=missing_grade.sum(),
    )
    nodes = (
        submissions.join(tree.nodes, how="cross")
        .join(by_node, on=["submission", "collapsed_id"], how="left")
        .select(
            "submission",
            "node_id",
            "parent_id",
            "depth",
            "leaf",
            "weight",
            "collapsed_id",
            "score",
            "graded_weight",
            pl.col("leaves").cast(pl.Int64),
            pl.col("missing_leaves").cast(pl.Int64),
        )
    )
    chains = (
        tree.nodes.filter(pl.col("collapsed_id").is_in(tree.leaves))
        .group_by("collapsed_id", maintain_order=True)
        .agg(chain=pl.col("node_id"))
        .rename({"collapsed_id": "leaf_id"})
    )
    missing = (
        full.filter(missing_grade & (pl.col("collapsed_id") == pl.col("leaf_id")))
        .select("submission", "leaf_id")
        .join(chains, on="leaf_id", how="left")
        .sort("submission", "leaf_id")
    )
    return TreeScores(nodes, missing)
