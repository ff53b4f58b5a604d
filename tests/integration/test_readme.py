"""README's and docs/'s Python examples run, in order, as one script: none may rot."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

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


def test_ci_runs_readmes_test_command():
    """`.ci/run` calls exactly README's second command (install and test)."""
    commands = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert commands[1].strip().endswith("-m pytest -n 2 --dist loadgroup")
    assert commands[1].strip() in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_test_command_keeps_a_files_tests_on_one_worker_and_the_cluster_files_together():
    """README's `-n 2 --dist loadgroup` runs files on the session's Ray cluster on
    one worker and the rest on the other (tests/conftest.py); pytest 9.2 would
    silently drop the groups (pytest-dev/pytest-xdist#1386)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
            "tests/unit/pure/test_mailbox.py",
            "tests/integration/test_examples_and_packaging.py",
            "-k",
            "mailbox or license",
        ],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    ran = re.findall(r"PASSED (\S+)", out.stdout)
    assert len(ran) == 8, out.stdout[-3000:]
    assert all(t.endswith("@apart") for t in ran if "test_mailbox.py" in t), ran
    assert [t for t in ran if "license" in t][0].endswith("@session-cluster"), ran
