"""Every notebook runs top to bottom on the committed results through a real Jupyter kernel (nbclient +
ipykernel, as `make notebook` runs it), and shows what its headings promise."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# mlflow_scorers.ipynb runs in tests/test_mlflow_scorers.py, which also reads its assessments back
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").glob("*.ipynb") if p.name != "mlflow_scorers.ipynb")


def _runner():
    spec = importlib.util.spec_from_file_location("run_notebooks", ROOT / "scripts" / "run_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # a kernel start and the whole notebook: ≈ 7 s
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom_in_a_kernel(path, tmp_path, monkeypatch, mlflow_store):
    shutil.copyfile(mlflow_store, tmp_path / "mlflow.db")
    monkeypatch.setenv("FACE_MLFLOW_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # an empty store is fine
    nb = _runner().execute(path, tmp_path)  # raises CellExecutionError naming the cell that broke
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code)  # every code cell ran, in the kernel
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert (tmp_path / path.name).exists()


def test_a_section_promising_cis_draws_them_and_the_mlflow_table_shows_run_names():
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "explore_results.ipynb", as_version=4)
    cells = nb.cells
    for i, c in enumerate(cells):
        if c.cell_type == "markdown" and "CI" in c.source:
            following = next(x for x in cells[i + 1:] if x.cell_type == "code")
            assert "ci_low" in following.source and "ci_high" in following.source and "errorbar" in following.source
        if c.cell_type == "code" and "search_runs" in c.source:
            assert "tags.mlflow.runName" in c.source
    assert any(c.cell_type == "markdown" and "make notebook" in c.source for c in cells)
