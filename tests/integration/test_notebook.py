"""examples/notebook.ipynb runs headless, top to bottom, on the test session's
Ray cluster (its kernel starts its own raydp Spark session), so it never rots."""

from __future__ import annotations

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.ray

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_notebook_runs_and_its_streamed_totals_equal_sparks(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster)
    monkeypatch.setenv("WEIR_NOTEBOOK_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(ROOT / "examples" / "notebook.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    last = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "500 customers: streamed totals equal Spark's" in last
    assert (tmp_path / "totals").is_dir() and not list((tmp_path / "totals").glob(".*"))  # no hidden leftovers
