"""Every notebook runs top to bottom on the committed results (code cells in order, one namespace)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(path.parent)
    monkeypatch.setenv("FACE_MLFLOW_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # an empty store is fine
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    assert cells, f"{path.name} has no code cell"
    namespace: dict = {"__name__": "__notebook__"}
    for i, cell in enumerate(cells):
        source = "".join(cell["source"])
        try:
            exec(compile(source, f"{path.name}[cell {i}]", "exec"), namespace)
        except Exception as e:  # name the cell that broke
            raise AssertionError(f"{path.name}, code cell {i} failed: {type(e).__name__}: {e}\n{source}") from e
