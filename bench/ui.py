"""W1 with the web UI open and closed, side by side: does watching a job slow it?

Runs bench.w1's keyed running sum (checkpoints every 1 s) alternately with no
page open and with the job's page open, which reads the job's overview (rates
of every task) and its checkpoints once a second through the UI's API, as the
page in a browser does. Prints each side's whole-execute() rate (median and
range) and their ratio.

    python3 -m bench.ui [--records 2000000] [--parallelism 2] [--repeat 3] [--port 8290]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import urllib.error
import urllib.request
from typing import Any

from bench.w1 import settle_pool, w1


class OpenPage:
    """A page open on ``job``'s overview: what it reads each second, and how
    many of its reads the UI answered with the job's figures."""

    def __init__(self, url: str, token: str | None, job: str) -> None:
        self._urls = [f"{url}api/jobs/{job}", f"{url}api/jobs/{job}/checkpoints"]
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._stop = threading.Event()
        self.answered = 0
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> OpenPage:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _read(self) -> None:
        while True:
            for url in self._urls:
                try:
                    with urllib.request.urlopen(urllib.request.Request(url, headers=self._headers), timeout=10) as r:
                        json.load(r)
                        self.answered += 1
                except urllib.error.HTTPError:
                    pass  # 404 before the job is up and after it ended
            if self._stop.wait(1.0):
                return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="runs per side, alternating")
    ap.add_argument("--settle-s", type=float, default=6.0, help="wait until the slot pool started nothing this long")
    ap.add_argument("--port", type=int, default=None, help="the UI's port when it has to start (default 8290)")
    args = ap.parse_args()
    from weir.actors.executor import ClusterJobs
    from weir.actors.ui_server import cluster_token, start_ui

    w1(100_000, args.parallelism, 1000)  # warm-up: starts the cluster and fills the slot pool
    where = start_ui(ClusterJobs, port=args.port)
    token = cluster_token() if where["token_required"] else None
    settle_pool(args.settle_s)
    job = f"bench-w1-p{args.parallelism}-cp"  # the name bench.w1 gives it
    closed, opened, reads = [], [], 0
    for _ in range(args.repeat):
        closed.append(args.records / w1(args.records, args.parallelism, 1000)[1])
        with OpenPage(where["url"], token, job) as page:
            opened.append(args.records / w1(args.records, args.parallelism, 1000)[1])
        reads += page.answered
        print(f"  closed {closed[-1]:,.0f}  open {opened[-1]:,.0f} records/s", flush=True)
    print(
        f"W1, {args.records:,} records, p={args.parallelism}, checkpoints every 1 s, whole execute() (median, range):"
    )
    for name, rates in (("closed", closed), ("open", opened)):
        median = statistics.median(rates)
        print(
            f"  web UI {name:<6} {median:>12,.0f} records/s  ({min(rates):,.0f}-{max(rates):,.0f})  "
            f"{median / statistics.median(closed):.2f}x closed"
        )
    print(f"the open page read the job's overview and checkpoints each second: {reads} answers ({where['url']})")


if __name__ == "__main__":
    main()
