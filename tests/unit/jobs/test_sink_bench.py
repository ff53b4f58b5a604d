"""bench.sinks, which docs/benchmarks.md quotes (the FileSink beside a discarding
sink), runs: a tiny run on the local executor, its main() in this process."""

from __future__ import annotations

import contextlib
import io
import sys

from bench import sinks


def test_the_sink_benchmark_prints_each_sinks_rate_beside_the_discarding_sinks(monkeypatch):
    monkeypatch.setattr(
        sys,
        "argv",
        ["bench.sinks", "--executor", "local", "--records", "5000", "--repeat", "1", "--checkpoint-ms", "100"],
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        sinks.main()  # asserts that every record was committed once to each FileSink
    lines = printed.getvalue().splitlines()
    assert lines[0].startswith(
        "keyed running sum, 5,000 records, parallelism 2, checkpoints every 100 ms, local executor"
    )
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["discard", "jsonl", "parquet"]
    assert all(" | steady " in line and "x the discarding sink's" in line for line in lines[1:])
