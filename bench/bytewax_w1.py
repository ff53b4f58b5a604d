"""Workload W1 as a Bytewax dataflow, for ``bench.versus`` (run by a Python that
has bytewax installed; weir does not depend on it). N from ``W1_RECORDS``, the
number of keys from ``W1_KEYS`` (1,000 unless set; ``bench.state_scale`` sets more).

    python -m bytewax.run bench.bytewax_w1:flow [-w WORKERS | -i ID -a ADDRESSES] [-r DIR -s 1]
"""

from __future__ import annotations

import os

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import TestingSource


class _Discard(StatelessSinkPartition):
    def write_batch(self, items: list) -> None:
        pass


class DiscardSink(DynamicSink):
    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Discard:
        return _Discard()


def _running_sum(total: int | None, value: int) -> tuple[int, int]:
    total = value if total is None else total + value
    return total, total


flow = Dataflow("w1")
numbers = op.input("in", flow, TestingSource(range(int(os.environ.get("W1_RECORDS", "1000000"))), batch_size=1000))
KEYS = int(os.environ.get("W1_KEYS", "1000"))
keyed = op.map("key", numbers, lambda i: (str(i % KEYS), 2 * i))  # Bytewax keys are strings
op.output("out", op.stateful_map("sum", keyed, _running_sum), DiscardSink())
