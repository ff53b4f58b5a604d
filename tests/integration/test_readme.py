"""README's Python examples run, in order, as one script: none may rot."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_readme_has_examples():
    assert len(readme_python_blocks()) >= 5


@pytest.mark.ray
def test_readme_examples_run(ray_cluster, spark):
    namespace: dict = {"__name__": "readme"}
    for i, block in enumerate(readme_python_blocks()):
        exec(compile(block, f"README.md python block {i + 1}", "exec"), namespace)
