"""examples/notebook.ipynb runs headless, top to bottom, on the test session's
Ray cluster, so it never rots. Its cells run in an IPython shell in the test
process, with what a kernel gives its notebook (each cell's printed text, its
displays, its last expression's rich value, matplotlib inline): a kernel of its
own was a process that joined Ray as a new driver (every task of its job a fresh
process) and started a Spark JVM of its own, a third of the suite's worker's
minute on this test; here the notebook's ``spark_session(...)`` returns the
session's Spark, started by the same call (the ``spark`` fixture).
``WEIR_REDRAW=1`` runs it in a real kernel instead and writes that run's outputs
back into the notebook (they are committed, so the story reads on GitHub without
running it)."""

from __future__ import annotations

import contextlib
import copy
import io
import os
import pathlib
import sys

import nbformat
import pytest

pytestmark = pytest.mark.ray

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run_in_a_kernel(nb: nbformat.NotebookNode, cwd: pathlib.Path) -> None:
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()


def _run_here(nb: nbformat.NotebookNode) -> None:
    """Each code cell in turn in one IPython shell of this process, its outputs
    as a kernel would send them; a cell that raises fails the test with its
    exception and the cell's output."""
    import matplotlib
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import Type
    from traitlets.config import Config

    outputs: list[nbformat.NotebookNode] = []

    class Results(DisplayHook):  # a cell's last expression: an execute_result with every format
        def write_output_prompt(self) -> None:
            pass

        def write_format_data(self, format_dict: dict, md_dict: dict | None = None) -> None:
            outputs.append(
                nbformat.v4.new_output(
                    "execute_result", data=format_dict, metadata=md_dict or {}, execution_count=self.prompt_count
                )
            )

    class Displays(DisplayPublisher):  # display() and the inline backend's figures
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs) -> None:
            outputs.append(nbformat.v4.new_output("display_data", data=data, metadata=metadata or {}))

    class Shell(InteractiveShell):
        displayhook_class = Type(Results)
        display_pub_class = Type(Displays)

        def enable_gui(self, gui=None) -> None:  # inline figures need no event loop
            pass

    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.colors = "nocolor"
    backend = matplotlib.get_backend()
    shell = Shell.instance(config=config)
    try:
        with matplotlib.rc_context():
            shell.enable_matplotlib("inline")  # as ipykernel does for every kernel
            for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
                out, err = io.StringIO(), io.StringIO()
                outputs.clear()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # threads' prints too
                    result = shell.run_cell(cell.source, store_history=True)
                streams = (("stdout", out.getvalue()), ("stderr", err.getvalue()))
                cell.outputs = [nbformat.v4.new_output("stream", name=n, text=t) for n, t in streams if t] + outputs
                error = result.error_in_exec or result.error_before_exec
                if error is not None:
                    raise AssertionError(
                        f"code cell {i} of the notebook raised {error!r}; its output:\n{out.getvalue()}"
                    ) from error
    finally:
        import matplotlib.pyplot as plt

        Shell.clear_instance()
        plt.close("all")
        plt.switch_backend(backend)


def test_the_notebook_runs_and_its_streamed_totals_equal_sparks(ray_cluster, spark, tmp_path, monkeypatch):
    monkeypatch.setenv("WEIR_NOTEBOOK_DIR", str(tmp_path))
    nb = nbformat.read(ROOT / "examples" / "notebook.ipynb", as_version=4)
    if os.environ.get("WEIR_REDRAW") == "1":
        monkeypatch.setenv("RAY_ADDRESS", ray_cluster)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        _run_in_a_kernel(nb, tmp_path)
        kept = copy.deepcopy(nb)  # without Ray's and the JVM's log lines, which say nothing to a reader
        for cell in (c for c in kept.cells if c.cell_type == "code"):
            cell["outputs"] = [o for o in cell.get("outputs", []) if o.get("name") != "stderr"]
        nbformat.write(kept, ROOT / "examples" / "notebook.ipynb")
    else:
        monkeypatch.chdir(tmp_path)  # where the kernel would start
        monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])  # the shell puts its own there
        monkeypatch.setattr(sys, "excepthook", sys.excepthook)
        _run_here(nb)
    text = {i: "".join(o.get("text", "") for o in c.get("outputs", [])) for i, c in enumerate(nb.cells)}
    assert "500 customers: streamed totals equal Spark's, after 1 restart(s) and a rescale" in text[len(nb.cells) - 1]
    assert any("killed notebook-totals/reduce/0" in t and "rescaled reduce to 3 tasks" in t for t in text.values())
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the plot is missing"
    assert any("image/svg+xml" in o.get("data", {}) for o in outputs), "the job graph picture is missing"
    assert (tmp_path / "totals").is_dir() and not list((tmp_path / "totals").glob(".*"))  # no hidden leftovers
