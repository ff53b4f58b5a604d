"""mypy on weir's typed packages (settings in pyproject.toml's ``[tool.mypy]``).

The packages install as ``weir.runtime``, ``weir.connectors``, ... from the
folders ``runtime/``, ``connectors/``, ... (pyproject's ``package-dir``). An
editable install reaches them through an import hook, which mypy does not run,
so mypy cannot find ``weir.runtime`` on its own. This lays the packages out as
a wheel does, with symlinks under ``build/typecheck/weir/``, and runs mypy
there; its messages name the files by their module paths
(``weir/runtime/task.py``). Run it by hand with::

    .venv/bin/python -m tests.typecheck
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"


def lay_out(tree: pathlib.Path = TREE) -> pathlib.Path:
    """The installed layout of every package in pyproject, as symlinks to the
    source folders (a file added later shows at once). Returns the tree."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders: dict[str, str] = setuptools["package-dir"]
    if tree.exists():
        shutil.rmtree(tree)
    for package in setuptools["packages"]:
        target = tree / package.replace(".", "/")
        if package in folders and folders[package] != package.replace(".", "/"):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(ROOT / folders[package], target_is_directory=True)
        else:  # a package in its own folder under weir/: its files, leaving room for the linked ones
            target.mkdir(parents=True, exist_ok=True)
            for f in (ROOT / package.replace(".", "/")).iterdir():
                if f.suffix in (".py", ".pyi", ".typed"):
                    (target / f.name).symlink_to(f)
    return tree


def run_mypy() -> subprocess.CompletedProcess[str]:
    tree = lay_out()
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
        ],
        cwd=tree,
        capture_output=True,
        text=True,
    )


if __name__ == "__main__":
    out = run_mypy()
    print(out.stdout + out.stderr, end="")
    sys.exit(out.returncode)
