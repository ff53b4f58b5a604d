"""Each Nexmark query as a plain Python loop over the Parquet data: the exact
output weir must produce (the tests' and the benchmark's checker), and the
one-core Python floor of the benchmark (timed reading the files too, as weir does).

A function ``qN(data)`` reads what the query reads (the kinds and columns it needs,
row by row as dicts, as weir's Parquet source hands them out) and returns the
query's output as a list of tuples, in the fields :mod:`bench.nexmark.queries`
emits. Two queries return something else, because their streaming output is not
a fixed multiset:

- q4 emits a running average per category, whose intermediate values depend on
  the order in which auctions close across subtasks: its reference is
  ``{category: (winning bids, final average)}``, the count of updates and the last.
- q12 counts per processing-time window: its reference is ``{bidder: bids}``, the
  most the fired windows can hold (windows still open when the input ends do not
  fire, as in Flink).

Event-time semantics (the same in :mod:`bench.nexmark.queries`): windows are
aligned to the epoch; a window ``[start, end)`` holds the events with ``start <=
dateTime < end``; the data has no late events (each file is in time order and the
watermark trails by 4 s), so no event is dropped.
"""

from __future__ import annotations

import collections
import glob
import os
from typing import Any, Callable, Iterator

import pyarrow.parquet as pq

SIZE_MS = 10_000  # Nexmark's window size (q5, q7, q8), session gap (q11), processing-time window (q12)
SLIDE_MS = 2_000  # q5's hop
EURO_RATE = 0.908  # q1: dollars to euros
Q2_MODULUS = 123
Q3_STATES = ("OR", "ID", "CA")
CATEGORY = 10  # q3, q20
LAST_WINNERS = 10  # q6: the average of a seller's last 10 winning bids

# What each query reads: kind -> columns (the projection Flink SQL pushes into its source).
COLUMNS: dict[str, dict[str, list[str]]] = {
    "q0": {"bid": ["auction", "bidder", "price", "dateTime", "extra"]},
    "q1": {"bid": ["auction", "bidder", "price", "dateTime", "extra"]},
    "q2": {"bid": ["auction", "price", "dateTime"]},
    "q3": {"person": ["id", "name", "city", "state", "dateTime"], "auction": ["id", "seller", "category", "dateTime"]},
    "q4": {"auction": ["id", "seller", "category", "dateTime", "expires"], "bid": ["auction", "price", "dateTime"]},
    "q5": {"bid": ["auction", "dateTime"]},
    "q6": {"auction": ["id", "seller", "category", "dateTime", "expires"], "bid": ["auction", "price", "dateTime"]},
    "q7": {"bid": ["auction", "price", "bidder", "dateTime", "extra"]},
    "q8": {"person": ["id", "name", "dateTime"], "auction": ["seller", "dateTime"]},
    "q11": {"bid": ["bidder", "dateTime"]},
    "q12": {"bid": ["bidder", "dateTime"]},
    "q20": {
        "bid": ["auction", "bidder", "price", "channel", "url", "dateTime", "extra"],
        "auction": [
            "id",
            "itemName",
            "description",
            "initialBid",
            "reserve",
            "dateTime",
            "expires",
            "seller",
            "category",
            "extra",
        ],
    },
}


def parts(data: str, kind: str) -> list[str]:
    """A kind's part files, in name order (= event-time order)."""
    return sorted(glob.glob(os.path.join(data, kind, "part-*.parquet")))


def rows(data: str, kind: str, columns: list[str]) -> Iterator[dict[str, Any]]:
    """A kind's rows as dicts of ``columns``, in file order."""
    for path in parts(data, kind):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536, columns=columns):
            yield from batch.to_pylist()


def _read(data: str, query: str, kind: str) -> Iterator[dict[str, Any]]:
    return rows(data, kind, COLUMNS[query][kind])


# ---------------------------------------------------------------------- stateless
def q0(data: str) -> list[tuple]:
    return [(b["auction"], b["bidder"], b["price"], b["dateTime"], b["extra"]) for b in _read(data, "q0", "bid")]


def q1(data: str) -> list[tuple]:
    return [
        (b["auction"], b["bidder"], EURO_RATE * b["price"], b["dateTime"], b["extra"]) for b in _read(data, "q1", "bid")
    ]


def q2(data: str) -> list[tuple]:
    return [(b["auction"], b["price"]) for b in _read(data, "q2", "bid") if b["auction"] % Q2_MODULUS == 0]


# ---------------------------------------------------------------------- joins
def q3(data: str) -> list[tuple]:
    """Persons of OR, ID or CA joined with their auctions of category 10."""
    persons = {p["id"]: p for p in _read(data, "q3", "person") if p["state"] in Q3_STATES}
    out = []
    for a in _read(data, "q3", "auction"):
        p = persons.get(a["seller"]) if a["category"] == CATEGORY else None
        if p is not None:
            out.append((p["name"], p["city"], p["state"], a["id"]))
    return out


def winning_bids(data: str, query: str) -> list[tuple[int, int, int, int, int]]:
    """Each auction's highest bid among those made while it ran (``dateTime <= bid
    <= expires``, Nexmark's SQL), as ``(auction, seller, category, price, expires)``."""
    auctions = {a["id"]: a for a in _read(data, query, "auction")}
    best: dict[int, int] = {}
    for b in _read(data, query, "bid"):
        a = auctions.get(b["auction"])
        if a is not None and a["dateTime"] <= b["dateTime"] <= a["expires"]:
            if b["price"] > best.get(b["auction"], -1):
                best[b["auction"]] = b["price"]
    return [
        (i, auctions[i]["seller"], auctions[i]["category"], price, auctions[i]["expires"]) for i, price in best.items()
    ]


def q4(data: str) -> dict[int, tuple[int, float]]:
    """Average winning price per category: ``{category: (updates, final average)}``."""
    totals: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0])
    for _, _, category, price, _ in winning_bids(data, "q4"):
        totals[category][0] += price
        totals[category][1] += 1
    return {c: (n, total / n) for c, (total, n) in totals.items()}


def q6(data: str) -> list[tuple]:
    """For each auction that closes with a winner, its seller's average winning
    price over their last 10 auctions to close (in order of closing time, then id)."""
    last: dict[int, collections.deque[int]] = collections.defaultdict(lambda: collections.deque(maxlen=LAST_WINNERS))
    out = []
    for _, seller, _, price, _ in sorted(winning_bids(data, "q6"), key=lambda w: (w[4], w[0])):
        prices = last[seller]
        prices.append(price)
        out.append((seller, sum(prices) / len(prices)))
    return out


def q20(data: str) -> list[tuple]:
    """Bids joined with their auction, for auctions of category 10."""
    auctions = {a["id"]: a for a in _read(data, "q20", "auction") if a["category"] == CATEGORY}
    out = []
    for b in _read(data, "q20", "bid"):
        a = auctions.get(b["auction"])
        if a is not None:
            out.append(q20_row(b, a))
    return out


def q20_row(b: dict[str, Any], a: dict[str, Any]) -> tuple:
    return (
        b["auction"],
        b["bidder"],
        b["price"],
        b["channel"],
        b["url"],
        b["dateTime"],
        b["extra"],
        a["itemName"],
        a["description"],
        a["initialBid"],
        a["reserve"],
        a["dateTime"],
        a["expires"],
        a["seller"],
        a["category"],
        a["extra"],
    )


# ---------------------------------------------------------------------- windows
def q5(data: str) -> list[tuple]:
    """Hot items: per sliding window (10 s every 2 s), the auctions with the most
    bids, as ``(auction, bids, window end)``."""
    counts: dict[int, dict[int, int]] = collections.defaultdict(lambda: collections.defaultdict(int))
    for b in _read(data, "q5", "bid"):
        t = b["dateTime"]
        start = t - t % SLIDE_MS
        while start > t - SIZE_MS:
            counts[start + SIZE_MS][b["auction"]] += 1
            start -= SLIDE_MS
    out = []
    for end, per_auction in counts.items():
        top = max(per_auction.values())
        out.extend((auction, n, end) for auction, n in per_auction.items() if n == top)
    return out


def q7(data: str) -> list[tuple]:
    """The highest bids of each 10 s window, as ``(auction, price, bidder,
    dateTime, extra)``: Nexmark's SQL joins a bid with the windows whose end lies
    in ``[dateTime, dateTime + 10 s]``, so a bid made exactly at a window's end
    also counts as the highest of the window before when its price is that one's."""
    best: dict[int, tuple[int, list[tuple]]] = {}
    on_edge: list[tuple] = []
    for b in _read(data, "q7", "bid"):
        bid = (b["auction"], b["price"], b["bidder"], b["dateTime"], b["extra"])
        end = b["dateTime"] - b["dateTime"] % SIZE_MS + SIZE_MS
        top = best.get(end)
        if top is None or bid[1] > top[0]:
            best[end] = (bid[1], [bid])
        elif bid[1] == top[0]:
            top[1].append(bid)
        if b["dateTime"] % SIZE_MS == 0:
            on_edge.append(bid)
    out = [bid for _, bids in best.values() for bid in bids]
    out.extend(bid for bid in on_edge if bid[3] in best and best[bid[3]][0] == bid[1])
    return out


def q8(data: str) -> list[tuple]:
    """Persons who created an auction in the 10 s window they joined in, as
    ``(id, name, window start)``."""
    sellers = {(a["seller"], a["dateTime"] - a["dateTime"] % SIZE_MS) for a in _read(data, "q8", "auction")}
    out = []
    for p in _read(data, "q8", "person"):
        start = p["dateTime"] - p["dateTime"] % SIZE_MS
        if (p["id"], start) in sellers:
            out.append((p["id"], p["name"], start))
    return out


def q11(data: str) -> list[tuple]:
    """Bids per bidder per session (a gap of 10 s ends one), as ``(bidder, bids,
    start, end)``, end = the last bid + 10 s (Flink's session windows merge
    ``[t, t + gap)`` windows that touch)."""
    open_: dict[int, list[int]] = {}  # bidder -> [count, start, last]
    out = []
    for b in _read(data, "q11", "bid"):  # in time order: the files are
        s = open_.get(b["bidder"])
        if s is not None and b["dateTime"] <= s[2] + SIZE_MS:
            s[0] += 1
            s[2] = max(s[2], b["dateTime"])
            continue
        if s is not None:
            out.append((b["bidder"], s[0], s[1], s[2] + SIZE_MS))
        open_[b["bidder"]] = [1, b["dateTime"], b["dateTime"]]
    out.extend((bidder, s[0], s[1], s[2] + SIZE_MS) for bidder, s in open_.items())
    return out


def q12(data: str) -> dict[int, int]:
    """Bids per bidder: what the processing-time windows add up to at most."""
    return dict(collections.Counter(b["bidder"] for b in _read(data, "q12", "bid")))


QUERIES: dict[str, Callable[[str], Any]] = {
    "q0": q0,
    "q1": q1,
    "q2": q2,
    "q3": q3,
    "q4": q4,
    "q5": q5,
    "q6": q6,
    "q7": q7,
    "q8": q8,
    "q11": q11,
    "q12": q12,
    "q20": q20,
}


class OutputMismatch(AssertionError):
    """weir's output is not the reference's."""


def check(query: str, output: list[Any], expected: Any, window_ms: int = SIZE_MS) -> str:
    """Raise :class:`OutputMismatch` unless ``output`` (weir's, each subtask's in
    its order) is what ``expected`` (this module's result) says; else say what was
    checked. ``window_ms``: q12's processing-time window."""
    if query == "q4":
        updates: dict[int, list[float]] = collections.defaultdict(list)
        for category, average in output:
            updates[category].append(average)
        got = {c: (len(u), u[-1]) for c, u in updates.items()}
        if got != expected:
            raise OutputMismatch(f"q4: (updates, final average) per category {got}, expected {expected}")
        return f"exact: {len(expected)} categories, {len(output):,} updates, final averages"
    if query == "q12":
        per_bidder: collections.Counter[int] = collections.Counter()
        for bidder, n, start, end in output:
            if start % window_ms or end - start != window_ms or n < 1:
                raise OutputMismatch(f"q12: {(bidder, n, start, end)} is no count of a {window_ms} ms window")
            per_bidder[bidder] += n
        over = [(b, n, expected.get(b, 0)) for b, n in per_bidder.items() if n > expected.get(b, 0)]
        if over:
            raise OutputMismatch(f"q12: more bids in windows than in the data (bidder, windows, data): {over[:5]}")
        fired, total = sum(per_bidder.values()), sum(expected.values())
        return f"consistent: {fired:,} of {total:,} bids in fired windows (processing time; the last ones do not fire)"
    got, want = collections.Counter(map(tuple, output)), collections.Counter(expected)
    if got != want:
        missing, extra = want - got, got - want
        raise OutputMismatch(
            f"{query}: {len(output):,} records, expected {len(expected):,}; "
            f"{sum(missing.values()):,} missing (e.g. {list(missing)[:3]}), "
            f"{sum(extra.values()):,} unexpected (e.g. {list(extra)[:3]})"
        )
    return f"exact: {len(output):,} records"


def floor(query: str, data: str) -> tuple[Any, float]:
    """The reference's result and its seconds (one core, plain Python)."""
    import time

    started = time.perf_counter()
    result = QUERIES[query](data)
    return result, time.perf_counter() - started
