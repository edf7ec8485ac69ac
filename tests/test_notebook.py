"""``notebooks/explore_run.ipynb`` runs top to bottom on a run of the bundled samples.

The code cells are executed in one namespace, in order, the way a kernel would, without a
Jupyter dependency; like papermill, the run directory is injected right after the cell
tagged ``parameters``. Figures are matplotlib ``Figure`` objects (no pyplot), so nothing
tries to open a window.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from pipeline.config import load_campaign
from pipeline.run import run
from tests.conftest import DATA, ROOT

NOTEBOOK = ROOT / "notebooks" / "explore_run.ipynb"


def test_explore_run_notebook_executes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run(load_campaign(DATA / "campaign.toml").override(**{"engine.workers": 1}), out)
    notebook = json.loads(NOTEBOOK.read_text("utf-8"))
    assert notebook["nbformat"] == 4
    namespace: dict[str, Any] = {"__name__": "__main__"}
    cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    tagged = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1
    for number, cell in enumerate(cells):
        source = "".join(cell["source"])
        exec(compile(source, f"{NOTEBOOK.name}[code cell {number}]", "exec"), namespace)
        if cell is tagged[0]:
            namespace["RUN_DIR"] = str(out)
        assert not cell["outputs"], "commit the notebook without outputs"
    assert namespace["turns"].preset.name == "pw-decide-row"
    assert namespace["judge"].slices[0].summary["n"] > 0
    assert isinstance(namespace["figure"], Figure)
