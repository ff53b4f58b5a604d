"""The cost of one delivery between two actors: a Ray actor call against weir's
socket exchange (actors/exchange.py), the same payload, the same flow control
(a bounded number in flight), on a warm cluster. Prints deliveries per second
and the CPU time each side spends per delivery, read from /proc for the two
actor processes (Ray's own threads in them included).

    python3 -m bench.exchange [--deliveries 5000] [--payload-bytes 40000]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from typing import Any

import ray
from rich.console import Console
from rich.table import Table

from weir.actors.cluster import ensure_ray
from weir.actors.exchange import Inbox, Outbox, Route
from weir.runtime.mailbox import Mailbox


def _cpu_s() -> float:
    """CPU seconds of this process, all its threads."""
    t = os.times()
    return t.user + t.system


def _end_process(cause: BaseException) -> None:
    """A receiver whose inbox broke takes nothing more: end it, and the run fails
    with Ray's actor-died error instead of waiting."""
    print(f"the receiver's inbox broke: {cause!r}", file=sys.stderr, flush=True)
    os._exit(1)


@ray.remote(num_cpus=0.1, max_concurrency=16)
class Receiver:
    def __init__(self) -> None:
        self.inbox = Inbox(ray.util.get_node_ip_address(), on_broken=_end_process)
        self.mailbox = Mailbox(1, capacity=4)

    def endpoint(self) -> Any:
        return self.inbox.endpoint

    def open(self, run: str) -> None:
        self.mailbox = Mailbox(1, capacity=4)
        self.inbox.open(run, 0, self.mailbox)

    def deliver(self, seq: int, payload: bytes) -> None:  # the Ray-call way
        self.mailbox.put_data(0, seq, payload)

    def take(self, n: int) -> float:
        """Take n deliveries from the mailbox; this process's CPU seconds meanwhile."""
        start = _cpu_s()
        for _ in range(n):
            while self.mailbox.take(10) is None:
                pass
        return _cpu_s() - start


@ray.remote(num_cpus=0.1)
class Sender:
    def ray_calls(self, target: Any, n: int, payload: bytes, in_flight: int) -> tuple[float, float]:
        start, cpu = time.perf_counter(), _cpu_s()
        pending: collections.deque[Any] = collections.deque()
        for seq in range(n):
            if len(pending) >= in_flight:
                ray.get(pending.popleft())
            pending.append(target.deliver.remote(seq, payload))
        ray.get(list(pending))
        return time.perf_counter() - start, _cpu_s() - cpu

    def sockets(self, endpoint: Any, run: str, n: int, payload: bytes) -> tuple[float, float]:
        start, cpu = time.perf_counter(), _cpu_s()
        out = Outbox([[Route(endpoint, 0, 0)]], run)
        for _ in range(n):
            out.send(0, 0, payload)
        out.drain()
        out.close()
        return time.perf_counter() - start, _cpu_s() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deliveries", type=int, default=5000)
    ap.add_argument("--payload-bytes", type=int, default=40_000, help="about one batch of 4,096 small records")
    args = ap.parse_args()
    ensure_ray()
    n, payload = args.deliveries, os.urandom(args.payload_bytes)
    recv, send = Receiver.remote(), Sender.remote()
    endpoint = ray.get(recv.endpoint.remote())
    table = Table(
        title=f"One delivery of {args.payload_bytes:,} bytes between two actors ({os.cpu_count()} cores, warm cluster)"
    )
    for col in ("transport", "deliveries/s", "sender CPU µs per delivery", "receiver CPU µs per delivery"):
        table.add_column(col, justify="right")
    rows = {}
    for name in ("Ray actor call", "weir socket exchange"):
        for warm_up in (True, False):
            count = 200 if warm_up else n
            ray.get(recv.open.remote(f"run-{name}-{warm_up}"))
            taking = recv.take.remote(count)
            if name == "Ray actor call":
                wall, send_cpu = ray.get(send.ray_calls.remote(recv, count, payload, 4))
            else:
                wall, send_cpu = ray.get(send.sockets.remote(endpoint, f"run-{name}-{warm_up}", count, payload))
            recv_cpu = ray.get(taking)
        # The receiver's figure counts its whole process while it takes (its Ray
        # threads handling calls included); the sender's, its whole process too.
        rows[name] = (n / wall, send_cpu / n * 1e6, recv_cpu / n * 1e6)
        table.add_row(name, f"{rows[name][0]:,.0f}", f"{rows[name][1]:,.0f}", f"{rows[name][2]:,.0f}")
        print(
            f"  {name}: {rows[name][0]:,.0f} deliveries/s, sender {rows[name][1]:,.0f} µs, receiver {rows[name][2]:,.0f} µs CPU each",
            flush=True,
        )
    Console().print(table)


if __name__ == "__main__":
    main()
