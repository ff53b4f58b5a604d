"""weir.runtime and weir.connectors are type-checked (mypy settings in pyproject.toml)."""

from __future__ import annotations

from tests.typecheck import lay_out, run_mypy


def test_mypy_passes_on_runtime_and_connectors():
    out = run_mypy()
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Success: no issues found" in out.stdout  # and it found the packages: a missing one is an error


def test_the_typecheck_layout_is_the_installed_one(tmp_path):
    tree = lay_out(tmp_path / "tree")
    assert (tree / "weir" / "__init__.py").is_file()
    assert (tree / "weir" / "runtime" / "task.py").is_file()
    assert (tree / "weir" / "connectors" / "files.py").is_file()
    assert sorted(p.name for p in tree.iterdir()) == ["weir"]
