"""One top-level package, ``weir``: the user API at its root, and no file left
importing the old top-level names (``runtime``, ``actors``, ``connectors``:
names of other projects on PyPI, and a second copy of every class where both
load)."""

from __future__ import annotations

import pathlib
import re

import weir
import weir.runtime

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_root_exports_the_runtime_api():
    assert weir.__all__ == weir.runtime.__all__
    for name in weir.__all__:
        assert getattr(weir, name) is getattr(weir.runtime, name), name


# Imports of the old top-level names, in code and in the code of docs, notebooks and configs.
_OLD_IMPORT = re.compile(r"\b(from (runtime|actors|connectors)(\.\w+)* import\b|import (runtime|actors|connectors)\b)"
                         r"|[\"'= ](runtime|actors|connectors)\.\w+:\w+"  # entry points
                         r"|-m (runtime|actors|connectors)\.")  # python -m actors.cli
_SKIP = {".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".pytest_cache", ".hypothesis"}


def _project_files() -> list[pathlib.Path]:
    found = []
    for path in ROOT.rglob("*"):
        if _SKIP & set(path.relative_to(ROOT).parts) or ".egg-info" in str(path) or not path.is_file():
            continue
        if path.suffix in (".py", ".md", ".ipynb", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt") or path.name == "run":
            found.append(path)
    return found


def test_no_file_imports_the_old_top_level_names():
    files = _project_files()
    assert ROOT / "README.md" in files and ROOT / "examples" / "notebook.ipynb" in files
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
                 for p in files for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
                 if _OLD_IMPORT.search(line) and p != pathlib.Path(__file__)]
    assert offenders == []
