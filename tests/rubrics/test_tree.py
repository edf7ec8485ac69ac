"""ARI tree aggregation against hand-computed trees, a recursive reference, and the
malformed inputs it must refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rubrics.tree import TreeError, load_grades, parse_envelope, score_tree


def node(node_id: str, weight: float, *children: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": node_id,
        "requirements": f"requirement {node_id}",
        "weight": weight,
    }
    if children:
        found["sub_tasks"] = list(children)
    return found


def envelope(root: dict[str, Any]) -> bytes:
    return json.dumps({"version": "3", "rubric": root}).encode()


def grades(*rows: tuple[str, str, float | None]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={"submission": pl.String, "leaf_id": pl.String, "score": pl.Float64},
        orient="row",
    )


def scores(
    root: dict[str, Any], *rows: tuple[str, str, float | None]
) -> dict[tuple[str, str], Any]:
    result = score_tree(parse_envelope(envelope(root)), grades(*rows))
    return {(r["submission"], r["node_id"]): r["score"] for r in result.nodes.iter_rows(named=True)}


def test_unequal_weights() -> None:
    #        root
    #   a (w3)       b (w1, leaf)
    # a1 (w1) a2 (w2)
    tree = node("root", 1, node("a", 3, node("a1", 1), node("a2", 2)), node("b", 1))
    got = scores(tree, ("s", "a1", 1), ("s", "a2", 0), ("s", "b", 1))
    # a = (1·1 + 2·0) / 3 = 1/3;  root = (3·(1/3) + 1·1) / 4 = 0.5
    assert got[("s", "a")] == pytest.approx(1 / 3)
    assert got[("s", "root")] == pytest.approx(0.5)
    assert got[("s", "a1")] == 1.0
    assert got[("s", "a2")] == 0.0
    got = scores(tree, ("t", "a1", 0), ("t", "a2", 1), ("t", "b", 0))
    # a = 2/3; root = (3·(2/3) + 0) / 4 = 0.5
    assert got[("t", "root")] == pytest.approx(0.5)


def test_single_child_chains_collapse() -> None:
    #          root
    #   w (w2)            c (w1)
    #   └ x (w0)          ├ c1 (w1)
    #     └ y (w7)        └ c2 (w3)
    #       ├ y1 (w1)
    #       └ y2 (w1)
    # The chain w → x → y folds into one node with w's id and weight 2; x's weight 0
    # and y's weight 7 play no part. y = 1/2; c = 3/4; root = (2·0.5 + 1·0.75) / 3.
    tree = node(
        "root",
        1,
        node("w", 2, node("x", 0, node("y", 7, node("y1", 1), node("y2", 1)))),
        node("c", 1, node("c1", 1), node("c2", 3)),
    )
    got = scores(tree, ("s", "y1", 1), ("s", "y2", 0), ("s", "c1", 0), ("s", "c2", 1))
    assert got[("s", "w")] == got[("s", "x")] == got[("s", "y")] == pytest.approx(0.5)
    assert got[("s", "c")] == pytest.approx(0.75)
    assert got[("s", "root")] == pytest.approx((2 * 0.5 + 0.75) / 3)


def test_a_chain_ending_in_a_leaf_is_graded_by_any_of_its_ids() -> None:
    # root has one child: the whole tree is a chain; a leaf grade at any id scores it.
    tree = node("root", 1, node("mid", 5, node("leaf", 0)))
    for leaf_id in ("root", "mid", "leaf"):
        got = scores(tree, ("s", leaf_id, 1))
        assert got == {("s", "root"): 1.0, ("s", "mid"): 1.0, ("s", "leaf"): 1.0}
    two = node("root", 1, node("p", 1, node("p1", 9)), node("q", 3))
    got = scores(two, ("s", "p1", 1), ("s", "q", 0))
    assert got[("s", "root")] == pytest.approx(0.25)
    with pytest.raises(TreeError, match="graded more than once"):
        scores(two, ("s", "p1", 1), ("s", "p", 0), ("s", "q", 0))


def test_missing_grades_are_reported_not_zero() -> None:
    tree = node("root", 1, node("a", 3, node("a1", 1), node("a2", 2)), node("b", 1))
    result = score_tree(
        parse_envelope(envelope(tree)),
        grades(("s", "a1", 1), ("s", "b", 1), ("t", "a1", 1), ("t", "a2", None), ("t", "b", 0)),
    )
    got = {(r["submission"], r["node_id"]): r for r in result.nodes.iter_rows(named=True)}
    # s misses a2: a and root have no score; b and a1 keep theirs.
    assert got[("s", "a")]["score"] is None
    assert got[("s", "root")]["score"] is None
    assert got[("s", "a1")]["score"] == 1.0
    assert got[("s", "b")]["score"] == 1.0
    assert got[("s", "a")]["missing_leaves"] == 1
    # graded weight: a1 carries 1/3 of a, and a carries 3/4 of root: 1/4, plus b's 1/4.
    assert got[("s", "root")]["graded_weight"] == pytest.approx(0.5)
    assert got[("s", "a")]["graded_weight"] == pytest.approx(1 / 3)
    # A null score is a missing grade too.
    assert got[("t", "root")]["score"] is None
    assert result.missing.select("submission", "leaf_id").rows() == [("s", "a2"), ("t", "a2")]


def test_a_missing_zero_weight_leaf_changes_nothing() -> None:
    tree = node("root", 1, node("a", 1), node("b", 0))
    result = score_tree(parse_envelope(envelope(tree)), grades(("s", "a", 1)))
    root = result.nodes.filter(pl.col("node_id") == "root").row(0, named=True)
    assert root["score"] == 1.0
    assert result.missing.select("leaf_id").to_series().to_list() == ["b"]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b'{"version": "3"}', "needs a 'rubric'"),
        (envelope(node("r", 1, node("a", 1), node("a", 1))), "used by more than one node"),
        (envelope(node("r", -1)), "finite weight >= 0"),
        (envelope({"id": "r", "weight": True}), "finite weight >= 0"),
        (envelope({"id": "", "weight": 1}), "non-empty string id"),
        (envelope({"id": "r", "weight": 1, "sub_tasks": {}}), "sub_tasks must be an array"),
        (envelope(node("r", 1, node("a", 0), node("b", 0))), "sum to 0"),
        (b'{"rubric": {"id": "r", "id": "s", "weight": 1}}', "json.duplicate_key"),
    ],
)
def test_malformed_trees_fail_clearly(document: bytes, message: str) -> None:
    with pytest.raises(TreeError, match=message):
        parse_envelope(document)


def test_bad_grades_fail_clearly() -> None:
    tree = parse_envelope(
        envelope(node("root", 1, node("a", 1, node("a1", 1), node("a2", 1)), node("b", 1)))
    )
    with pytest.raises(TreeError, match="internal node"):
        score_tree(tree, grades(("s", "a", 1)))
    with pytest.raises(TreeError, match="not in the rubric"):
        score_tree(tree, grades(("s", "zzz", 1)))
    with pytest.raises(TreeError, match="graded more than once"):
        score_tree(tree, grades(("s", "b", 1), ("s", "b", 1)))


def test_grades_files(tmp_path: Path) -> None:
    jsonl = tmp_path / "grades.jsonl"
    jsonl.write_text(
        '{"submission": "s", "leaf_id": "a", "score": 1}\n\n{"submission": "s", "leaf_id": "b", "score": null}\n'
    )
    frame = load_grades(jsonl)
    assert frame.rows() == [("s", "a", 1.0), ("s", "b", None)]
    parquet = tmp_path / "grades.parquet"
    pl.DataFrame({"submission": ["s"], "leaf_id": ["a"], "score": [1]}).write_parquet(parquet)
    assert load_grades(parquet).rows() == [("s", "a", 1.0)]
    for text, message in [
        ('{"submission": "s", "leaf_id": "a", "score": 0.5}\n', "must be 0 or 1"),
        ('{"submission": "s", "leaf_id": "a", "score": true}\n', "score must be 0, 1 or null"),
        ('{"submission": "s", "leaf_id": "a"}\n', "missing score"),
        ('{"submission": "s", "leaf_id": "a", "score": 1, "score": 0}\n', "json.duplicate_key"),
    ]:
        jsonl.write_text(text)
        with pytest.raises(TreeError, match=message):
            load_grades(jsonl)


# -- property: the vectorised group-by equals the recursive definition ------------------


@st.composite
def trees(draw: st.DrawFn, depth: int = 0, counter: list[int] | None = None) -> dict[str, Any]:
    counter = counter if counter is not None else [0]
    counter[0] += 1
    node_id = f"n{counter[0]}"
    weight = draw(st.integers(0, 4)) if depth else 1
    if depth >= 3 or draw(st.integers(0, 2)) == 0:
        return node(node_id, weight)
    children = [draw(trees(depth + 1, counter)) for _ in range(draw(st.integers(1, 3)))]
    if len(children) > 1 and sum(c["weight"] for c in children) == 0:
        children[0]["weight"] = 1
    return node(node_id, weight, *children)


def _reference(tree: dict[str, Any], grade: dict[str, float]) -> dict[str, float | None]:
    """score(node) = Σ wᵢ·score(childᵢ) / Σ wᵢ recursively, folding single-child chains."""
    out: dict[str, float | None] = {}

    def visit(n: dict[str, Any], ids: list[str]) -> float | None:
        children = n.get("sub_tasks") or []
        if len(children) == 1:
            return visit(children[0], [*ids, n["id"]])
        if not children:
            value = next((grade[i] for i in [*ids, n["id"]] if i in grade), None)
        else:
            parts = [(c["weight"], visit(c, [])) for c in children]
            total = sum(w for w, _ in parts)
            unknown = any(s is None and w > 0 for w, s in parts)
            value = None if unknown else sum(w * s for w, s in parts if w > 0) / total  # type: ignore[operator]
        for i in [*ids, n["id"]]:
            out[i] = value
        return value

    visit(tree, [])
    return out


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_vectorised_tree_equals_the_recursive_definition(data: st.DataObject) -> None:
    tree = data.draw(trees())
    parsed = parse_envelope(envelope(tree))
    grade = {}
    for leaf in parsed.leaves:
        choice = data.draw(st.sampled_from([0.0, 1.0, 1.0, None]))
        if choice is not None:
            grade[leaf] = choice
    rows = [("s", leaf, score) for leaf, score in grade.items()] or [("s", parsed.leaves[0], None)]
    result = score_tree(parsed, grades(*rows))
    expected = _reference(tree, grade)
    for row in result.nodes.iter_rows(named=True):
        want = expected[row["node_id"]]
        if want is None:
            assert row["score"] is None, row["node_id"]
        else:
            assert row["score"] == pytest.approx(want, abs=1e-12), row["node_id"]


def test_a_mean_stays_within_its_leaves_grades() -> None:
    """A node's score was a sum of rounded products of shares: leaves all graded 1 gave
    0.9999999999999999, and 1.0000000000000002 above the scale."""
    tree = node(
        "r",
        1,
        node("A", 1, node("a1", 1), node("a2", 2)),
        node("B", 1, node("b1", 2), node("b2", 1)),
    )
    got = scores(tree, *(("s", leaf, 1.0) for leaf in ("a1", "a2", "b1", "b2")))
    assert {got[("s", n)] for n in ("r", "A", "B")} == {1.0}
    got = scores(
        node("r", 1, node("x", 0.1), node("y", 0.7), node("z", 0.7)),
        *(("s", leaf, 1.0) for leaf in "xyz"),
    )
    assert got[("s", "r")] == 1.0
    tree = node("r", 1, node("p", 0.7, node("q", 0.2), node("t", 0.3)), node("u", 0.1))
    got = scores(tree, *(("s", leaf, 1.0) for leaf in "qtu"))
    assert got[("s", "r")] == 1.0


def test_a_missing_grade_is_missing_however_small_its_weight() -> None:
    """A leaf's effective weight, a product of shares, underflowed to 0 twenty levels
    down, and its missing grade was then ignored: the root scored 1.0, its child null."""
    tree: dict[str, Any] = node("leaf-17", 1)
    for level in range(19, -1, -1):
        tree = node(f"l{level}", 1, node(f"big-{level}", 9_000_000_000_000_000_000), tree)
    root = node("r", 1, tree, node("other", 1))
    graded = [("s", f"big-{level}", 1.0) for level in range(20)] + [("s", "other", 1.0)]
    got = scores(root, *graded)
    assert got[("s", "l0")] is None
    assert got[("s", "r")] is None


def test_weights_summing_beyond_a_float_are_refused() -> None:
    """1e308 + 1e308 was an internal error (OverflowError, exit 4)."""
    with pytest.raises(TreeError, match="sum beyond the largest float"):
        parse_envelope(envelope(node("r", 1, node("a", 1e308), node("b", 1e308))))


def test_a_grade_line_may_carry_more_fields(tmp_path: Path) -> None:
    """A JSONL grade line of more than 64 items or deeper than 4 (a judge's notes) was
    refused as not strict JSON; the same rows as Parquet were read."""
    line = {"submission": "s", "leaf_id": "a", "score": 1, "notes": {"tokens": list(range(100))}}
    path = tmp_path / "grades.jsonl"
    path.write_text(json.dumps(line) + "\n")
    assert load_grades(path).to_dicts() == [{"submission": "s", "leaf_id": "a", "score": 1.0}]
