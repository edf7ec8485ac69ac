"""``notebooks/explore_run.ipynb``: committed without outputs, written against the public API
only, and executed by a real Jupyter kernel (nbconvert's ``ExecutePreprocessor``) on a run of
the bundled campaign, every figure cell showing a PNG image.

Like papermill, the test's run directory is injected in a cell right after the cell tagged
``parameters``. Cells tagged ``figure`` must each display an ``image/png``: a matplotlib
figure built without pyplot is otherwise shown as the text ``<Figure size 700x1944 with 1
Axes>``.
"""

from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbconvert.preprocessors import ExecutePreprocessor

import pipeline
from tests.conftest import DATA, ROOT

NOTEBOOK = ROOT / "notebooks" / "explore_run.ipynb"


def _code_cells(notebook: Any) -> list[Any]:
    return [c for c in notebook.cells if c.cell_type == "code"]


def _tagged(cell: Any, tag: str) -> bool:
    return tag in cell.metadata.get("tags", [])


def test_notebook_is_committed_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    for cell in _code_cells(notebook):
        assert not cell.outputs, "commit the notebook without outputs"
        assert cell.execution_count is None, "commit the notebook without execution counts"


def test_notebook_uses_only_the_public_api() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    used: set[str] = set()
    for cell in _code_cells(notebook):
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline"):
                pytest.fail(f"import pipeline and use its public names, not {node.module!r}")
            if isinstance(node, ast.Import):
                internal = [a.name for a in node.names if a.name.startswith("pipeline.")]
                assert not internal, f"internal modules imported: {internal}"
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "pipeline"
            ):
                used.add(node.attr)
    assert used, "the notebook should use rowgate's public API"
    assert used <= set(pipeline.__all__), f"not public: {sorted(used - set(pipeline.__all__))}"


@pytest.mark.slow
def test_notebook_executes_and_shows_figures_as_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    config = pipeline.load_campaign(DATA / "campaign.toml").override(**{"engine.workers": 1})
    pipeline.run_campaign(config, out)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    cells = notebook.cells
    (parameters,) = [i for i, c in enumerate(cells) if _tagged(c, "parameters")]
    injected = nbformat.v4.new_code_cell(f"RUN_DIR = {str(out)!r}")
    injected.metadata["tags"] = ["injected-parameters"]
    cells.insert(parameters + 1, injected)
    figures = [c for c in cells if _tagged(c, "figure")]
    assert len(figures) >= 4

    workdir = tmp_path / "checkout" / "notebooks"
    workdir.mkdir(parents=True)
    shutil.copy(NOTEBOOK, workdir / NOTEBOOK.name)
    # the kernel is a new process: it imports this checkout's package, not an installed one
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    executor = ExecutePreprocessor(timeout=600, kernel_name="python3")
    executor.preprocess(notebook, {"metadata": {"path": str(workdir)}})

    outputs = [o for c in _code_cells(notebook) for o in c.outputs]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, [f"{o.ename}: {o.evalue}" for o in errors]
    shown_as_text = [
        o.data["text/plain"]
        for o in outputs
        if "data" in o
        and "image/png" not in o.data
        and "<Figure size" in o.data.get("text/plain", "")
    ]
    assert not shown_as_text, f"figures shown as text: {shown_as_text}"
    for cell in figures:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(images) == 1, f"figure cell shows no PNG: {cell.source!r}"
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= len(figures)
    # it read the injected run: the default RUN_DIR ("../out") was never written
    assert not (workdir.parent / "out").exists()
    nbformat.validate(notebook)
