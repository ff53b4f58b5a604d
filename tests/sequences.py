"""A job whose records each carry a unique (partition, sequence), for checks
record by record (``tests.checker.check_sequences``): the mixed chaos suite on
Ray and the control races in-process share it."""

from __future__ import annotations

import json
from typing import Any

from weir import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from weir.connectors.files import FileSink, committed_files

PARTITIONS = 2


class Count(KeyedProcessFunction):
    """(partition, seq) -> (partition, seq, records of the partition so far)."""

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.count.update(self.count.value() + 1)
        yield (value[0], value[1], self.count.value())


def sequence_job(env: StreamExecutionEnvironment, out_dir: str, n: int, rate: float) -> None:
    """Source split p of the generator carries partition p's sequences in order."""
    (
        env.from_generator(lambda i: (i * PARTITIONS // n, i % (n // PARTITIONS)), count=n, records_per_second=rate)
        .uid("src")
        .key_by(lambda r: r[0])
        .process(Count())
        .uid("count")
        .sink_to(FileSink(out_dir))
        .uid("sink")
    )


def committed_sequences(*outs: str) -> list[list[tuple[int, int]]]:
    """The committed (partition, sequence) records, file by file."""
    files = []
    for out in outs:
        for path in committed_files(out):
            with open(path) as f:
                files.append([(r[0], r[1]) for r in map(json.loads, f)])
    return files
