"""README's and docs/'s Python examples run, in order, as one script: none may rot."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


# The pages in the order README's Documentation table lists them: later examples
# use what earlier ones defined.
PAGES = [
    "README.md",
    "docs/api.md",
    "docs/operations.md",
    "docs/spark.md",
    "docs/reliability.md",
    "docs/state.md",
    "docs/security.md",
    "docs/cluster.md",
    "docs/testing.md",
    "docs/how-it-works.md",
    "docs/benchmarks.md",
    "docs/kafka.md",
]


def readme_python_blocks() -> list[tuple[str, str]]:
    """(page, block) for every Python example, page by page."""
    return [
        (page, block) for page in PAGES for block in re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.S)
    ]


def test_every_docs_page_is_run():
    assert sorted(PAGES[1:]) == sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))


def test_readme_has_examples():
    assert len(readme_python_blocks()) >= 5


@pytest.mark.ray
def test_readme_examples_run(ray_cluster, spark, kafka_broker, s3_server, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_broker.bootstrap)  # the Kafka page's blocks read it
    bucket, options = s3_server.uri().split("?")  # the S3 page's blocks read these
    monkeypatch.setenv("S3_BUCKET", bucket)
    monkeypatch.setenv("S3_OPTIONS", "?" + options)
    namespace: dict = {"__name__": "readme"}
    for i, (page, block) in enumerate(readme_python_blocks()):
        exec(compile(block, f"{page} python block {i + 1}", "exec"), namespace)
