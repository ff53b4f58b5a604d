"""Nexmark's event generator: persons, auctions and bids, following the rules of
the public generator (nexmark/nexmark's ``NexmarkGenerator``, ``GeneratorConfig``,
``PersonGenerator``, ``AuctionGenerator``, ``BidGenerator``), deterministic from a
seed, written as Parquet or used in-process.

    python3 -m bench.nexmark.generator --events N --seed S --out DIR [--events-per-part 160000]

The rules kept:

- Event ``n`` (0, 1, ...) is a person, an auction or a bid by ``n % 50``: 0 a
  person, 1-3 an auction, 4-49 a bid (proportions 1:3:46).
- Ids come from the event number: the person of event ``n`` is ``n // 50 + 1000``,
  the auctions ``3 * (n // 50) + (n % 50 - 1) + 1000``; every id that exists is
  derived, never drawn.
- Event time advances by the inter-event delay, ``1e6 / rate`` microseconds
  (10,000 events/s by default): event ``n`` happens at ``base + floor(n * delay_us) / 1000`` ms,
  so every file is ordered by time.
- A bid goes to a hot auction with probability 1 - 1/2 (the first of the newest
  batch of 100 auctions), else to one of the last 100 auctions or up to 10 not
  created yet; its bidder is hot with probability 1 - 1/4 (the second of the
  newest batch of 100 persons), else one of the last 1,000 persons or up to 10
  ahead. An auction's seller is hot with probability 1 - 1/4 (the first of the
  newest batch of 100 persons), likewise. So a bid may name an auction, and an
  auction or a bid a person, that only a later event creates: the join queries
  must wait for them, as on Nexmark's data.
- An auction expires ``1 + uniform[0, 2 * horizon)`` ms after it starts, where the
  horizon is the time Nexmark takes to create 100 more auctions (167 ms at
  10,000 events/s); its category is one of 10-14; reserve = initial bid + a price.
- A price is ``round(10 ** (6u) * 100)``, u uniform in [0, 1); strings are
  lowercase letters with spaces (1 in 13), ``extra`` pads each event to its
  average size (person 200, auction 500, bid 100 bytes) within ±20 %.
- A bid's channel is one of four hot ones (Google, Facebook, Baidu, Apple) half
  the time, else ``channel-<k>`` of 10,000, each with its own URL; 9 of 10 of those
  URLs end in ``&channel_id=<abs(Integer.reverse(k))>``.

What differs from the Java generator, and why:

- Randomness comes from numpy, seeded per block of 10,000 events by ``(seed,
  block)``: the same seed gives the same events on any machine, a prefix of a
  longer run is the shorter run, and any event can be computed on its own
  (:func:`event_at`, for ``env.from_generator``). The Java generator draws from an
  unseeded ``SplittableRandom``, so two of its runs differ.
- Strings are made a block at a time in numpy; a random string of Nexmark's
  ``nextString`` has letters at both ends instead of being trimmed.
- The Java ``BidGenerator`` of nexmark-flink adds ``FIRST_PERSON_ID`` to the bidder
  twice (bidders 2000 up, persons 1000 up, so no bid ever names an existing
  person); here it is added once, as in the Beam original.
- No out-of-order groups, delayed events or rate shapes (nexmark-flink's defaults
  have none either): event times only grow.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
HOT_SELLER_BATCH = 100  # Java's HOT_SELLER_RATIO: a hot seller is the first person of the newest batch of 100
HOT_AUCTION_BATCH = 100
HOT_BIDDER_BATCH = 100
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
NUM_CHANNELS = 10_000
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
)
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
BASE_TIME_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: a fixed base, so the data does not depend on the clock
BLOCK_EVENTS = 10_000  # events per random block: the unit of determinism, not of files

KINDS = ("person", "auction", "bid")
SCHEMAS = {
    "person": pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("emailAddress", pa.string()),
            ("creditCard", pa.string()),
            ("city", pa.string()),
            ("state", pa.string()),
            ("dateTime", pa.int64()),
            ("extra", pa.string()),
        ]
    ),
    "auction": pa.schema(
        [
            ("id", pa.int64()),
            ("itemName", pa.string()),
            ("description", pa.string()),
            ("initialBid", pa.int64()),
            ("reserve", pa.int64()),
            ("dateTime", pa.int64()),
            ("expires", pa.int64()),
            ("seller", pa.int64()),
            ("category", pa.int64()),
            ("extra", pa.string()),
        ]
    ),
    "bid": pa.schema(
        [
            ("auction", pa.int64()),
            ("bidder", pa.int64()),
            ("price", pa.int64()),
            ("channel", pa.string()),
            ("url", pa.string()),
            ("dateTime", pa.int64()),
            ("extra", pa.string()),
        ]
    ),
}
META_FILE = "_nexmark.json"  # skipped by FileSource (a leading underscore), and outside the kinds' folders anyway


@dataclass(frozen=True)
class GeneratorConfig:
    """Nexmark's settings (``NexmarkConfiguration``'s names and defaults)."""

    seed: int = 0
    events_per_second: int = 10_000  # first-event.rate: event time advances 1e6 / rate us per event
    base_time_ms: int = BASE_TIME_MS
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    def kind_of(self, event: int) -> str:
        rem = event % self.total_proportion
        if rem < self.person_proportion:
            return "person"
        return "auction" if rem < self.person_proportion + self.auction_proportion else "bid"

    def timestamp(self, events: Any) -> Any:
        """Event time (epoch ms) of event number(s) ``events``: Java's
        ``baseTime + (long)(n * interEventDelayUs) / 1000``."""
        delay_us = 1_000_000 / self.events_per_second
        if isinstance(events, np.ndarray):
            return self.base_time_ms + np.floor(events * delay_us).astype(np.int64) // 1000
        return self.base_time_ms + math.floor(events * delay_us) // 1000

    def counts(self, events: int) -> dict[str, int]:
        """How many persons, auctions and bids the first ``events`` events hold."""
        epochs, rest = divmod(events, self.total_proportion)
        p, a = self.person_proportion, self.auction_proportion
        person = epochs * p + min(rest, p)
        auction = epochs * a + min(max(rest - p, 0), a)
        return {"person": person, "auction": auction, "bid": events - person - auction}


# ---------------------------------------------------------------------- ids (PersonGenerator, AuctionGenerator)
def last_base0_person_id(cfg: GeneratorConfig, event: np.ndarray) -> np.ndarray:
    """The newest person id (base 0) at ``event``: the event's own if it is a person."""
    epoch, offset = event // cfg.total_proportion, event % cfg.total_proportion
    return epoch * cfg.person_proportion + np.minimum(offset, cfg.person_proportion - 1)


def last_base0_auction_id(cfg: GeneratorConfig, event: np.ndarray) -> np.ndarray:
    """The newest auction id (base 0) at ``event``: the event's own if it is an auction."""
    p, a = cfg.person_proportion, cfg.auction_proportion
    epoch, offset = event // cfg.total_proportion, event % cfg.total_proportion
    in_epoch = np.where(offset < p, a - 1, np.where(offset >= p + a, a - 1, offset - p))
    return np.where(offset < p, epoch - 1, epoch) * a + in_epoch


def next_base0_person_id(cfg: GeneratorConfig, rng: np.random.Generator, event: np.ndarray) -> np.ndarray:
    """One of the last ``num_active_people`` persons, or up to 10 not created yet."""
    people = last_base0_person_id(cfg, event) + 1
    active = np.minimum(people, cfg.num_active_people)
    return people - active + rng.integers(0, active + PERSON_ID_LEAD)


def next_base0_auction_id(cfg: GeneratorConfig, rng: np.random.Generator, event: np.ndarray) -> np.ndarray:
    """One of the last ``num_in_flight_auctions`` auctions, or up to 10 not created yet."""
    newest = last_base0_auction_id(cfg, event)
    oldest = np.maximum(newest - cfg.num_in_flight_auctions, 0)
    return oldest + rng.integers(0, newest - oldest + 1 + AUCTION_ID_LEAD)


# ---------------------------------------------------------------------- values (PriceGenerator, StringsGenerator)
def _java_round(x: np.ndarray) -> np.ndarray:
    return np.floor(x + 0.5).astype(np.int64)


def next_price(rng: np.random.Generator, size: int) -> np.ndarray:
    return _java_round(np.power(10.0, rng.random(size) * 6.0) * 100.0)


def _text(rng: np.random.Generator, lengths: np.ndarray, filler: int | None, letter_ends: bool) -> pa.Array:
    """Random lowercase strings of the given lengths, built as one Arrow buffer;
    ``filler`` (a space, or '_') replaces 1 letter in 13. ``letter_ends``: the
    first and last character are letters (Nexmark trims spaces off the ends)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    chars = rng.integers(ord("a"), ord("z") + 1, size=total, dtype=np.uint8)
    if filler is not None:
        chars[rng.random(total) < 1 / 13] = filler
        if letter_ends:
            some = lengths > 0
            for at in (ends[some] - lengths[some], ends[some] - 1):
                chars[at] = rng.integers(ord("a"), ord("z") + 1, size=len(at), dtype=np.uint8)
    offsets = np.concatenate([[0], ends]).astype(np.int32)
    return pa.StringArray.from_buffers(len(lengths), pa.py_buffer(offsets), pa.py_buffer(chars))


# Arrays are built from buffers, never from Python or numpy values: any such
# conversion in pyarrow (pa.array, a plain value given to a compute function,
# to_numpy) imports pandas first, about a second of CPU, which each task process
# of an in-process source would pay (and a task busy importing misses its
# cancel's grace on a failover, so its slot is replaced).
def _ints(values: Any) -> pa.Array:
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def _strings(values: list[str]) -> pa.Array:
    encoded = [v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))


def _joined(*parts: pa.Array | str) -> pa.Array:
    """Each row's parts concatenated (a ``str`` part: the same text in every row)."""
    n = next(len(p) for p in parts if not isinstance(p, str))
    texts = [[p] * n if isinstance(p, str) else p.to_pylist() for p in parts]
    return _strings(["".join(row) for row in zip(*texts)])


def _lengths(strings: pa.Array) -> np.ndarray:
    """The characters of each string (ASCII: its bytes), as numpy."""
    lengths = pc.utf8_length(strings)
    return np.frombuffer(lengths.buffers()[1], dtype=np.int32, count=len(lengths), offset=4 * lengths.offset)


def next_string(rng: np.random.Generator, max_length: int, size: int, filler: int = ord(" ")) -> pa.Array:
    """Nexmark's ``nextString``: 3 to ``max_length - 1`` characters."""
    return _text(rng, 3 + rng.integers(0, max_length - 3, size=size), filler, letter_ends=filler == ord(" "))


def next_extra(rng: np.random.Generator, current: np.ndarray, average: int) -> pa.Array:
    """Nexmark's ``nextExtra``: letters that bring an event of ``current`` bytes to
    ``average`` bytes on average (±20 %); none when it is bigger already."""
    desired = average - np.asarray(current, dtype=np.int64)
    delta = _java_round(desired * 0.2)
    spread = rng.integers(0, np.maximum(2 * delta, 1))
    lengths = np.where(desired < 0, 0, desired - delta + np.where(delta == 0, 0, spread))
    return _text(rng, lengths, None, letter_ends=False)


def _java_reverse_abs(i: int) -> int:
    """``Math.abs(Integer.reverse(i))`` of a 32-bit int."""
    r = int(f"{i & 0xFFFFFFFF:032b}"[::-1], 2)
    return abs(r - (1 << 32) if r >= 1 << 31 else r)


@functools.lru_cache(maxsize=8)
def channels(seed: int) -> tuple[pa.Array, pa.Array]:
    """Every channel and its URL: the 4 hot ones first, then ``channel-0`` ...
    ``channel-9999`` (BidGenerator's cache, made once per seed)."""
    rng = np.random.default_rng([seed, 0xC4A77E15])
    n = len(HOT_CHANNELS) + NUM_CHANNELS
    parts = [next_string(rng, 5, n, filler=ord("_")) for _ in range(3)]
    site, query = "https://www.nexmark.com/", "/item.htm?query=1"
    tagged = rng.integers(0, 10, size=NUM_CHANNELS) > 0
    suffix = [""] * len(HOT_CHANNELS) + [
        f"&channel_id={_java_reverse_abs(k)}" if tagged[k] else "" for k in range(NUM_CHANNELS)
    ]
    urls = _joined(site, parts[0], "/", parts[1], "/", parts[2], query, _strings(suffix))
    names = _strings(list(HOT_CHANNELS) + [f"channel-{k}" for k in range(NUM_CHANNELS)])
    return names, urls


# ---------------------------------------------------------------------- a block of events
@functools.lru_cache(maxsize=4)
def block(cfg: GeneratorConfig, index: int) -> dict[str, pa.Table]:
    """Events ``index * 10,000`` to ``(index + 1) * 10,000 - 1``: a table per kind,
    each with an ``event`` column (the event number) before the contract's columns."""
    if cfg.seed < 0 or index < 0:
        raise ValueError(f"seed and block must be non-negative, got seed {cfg.seed}, block {index}")
    rng = np.random.default_rng([cfg.seed, index])
    events = np.arange(index * BLOCK_EVENTS, (index + 1) * BLOCK_EVENTS, dtype=np.int64)
    rem = events % cfg.total_proportion
    p, a = cfg.person_proportion, cfg.auction_proportion
    return {
        "person": _persons(cfg, rng, events[rem < p]),
        "auction": _auctions(cfg, rng, events[(rem >= p) & (rem < p + a)]),
        "bid": _bids(cfg, rng, events[rem >= p + a]),
    }


def _table(kind: str, events: np.ndarray, columns: dict[str, Any]) -> pa.Table:
    schema = SCHEMAS[kind].insert(0, pa.field("event", pa.int64()))
    arrays = {"event": events, **columns}
    return pa.Table.from_arrays(
        [
            a if isinstance(a, pa.Array) else _strings(a) if isinstance(a, list) else _ints(a)
            for a in (arrays[f.name] for f in schema)
        ],
        schema=schema,
    )


def _persons(cfg: GeneratorConfig, rng: np.random.Generator, events: np.ndarray) -> pa.Table:
    n = len(events)
    names = [
        f"{FIRST_NAMES[f]} {LAST_NAMES[s]}"
        for f, s in zip(rng.integers(0, len(FIRST_NAMES), n), rng.integers(0, len(LAST_NAMES), n))
    ]
    emails = _joined(next_string(rng, 7, n), "@", next_string(rng, 5, n), ".com")
    cards = [" ".join(f"{d:04d}" for d in row) for row in rng.integers(0, 10_000, size=(n, 4)).tolist()]
    cities = [US_CITIES[i] for i in rng.integers(0, len(US_CITIES), n)]
    states = [US_STATES[i] for i in rng.integers(0, len(US_STATES), n)]
    size = (
        8
        + np.array([len(s) for s in names], dtype=np.int64)
        + _lengths(emails)
        + 19  # the credit card
        + np.array([len(c) for c in cities], dtype=np.int64)
        + 2  # the state
    )
    return _table(
        "person",
        events,
        {
            "id": last_base0_person_id(cfg, events) + FIRST_PERSON_ID,
            "name": names,
            "emailAddress": emails,
            "creditCard": cards,
            "city": cities,
            "state": states,
            "dateTime": cfg.timestamp(events),
            "extra": next_extra(rng, size, cfg.avg_person_byte_size),
        },
    )


def _auctions(cfg: GeneratorConfig, rng: np.random.Generator, events: np.ndarray) -> pa.Table:
    n = len(events)
    hot = rng.integers(0, cfg.hot_sellers_ratio, n) > 0
    hot_seller = (last_base0_person_id(cfg, events) // HOT_SELLER_BATCH) * HOT_SELLER_BATCH
    seller = np.where(hot, hot_seller, next_base0_person_id(cfg, rng, events)) + FIRST_PERSON_ID
    category = FIRST_CATEGORY_ID + rng.integers(0, NUM_CATEGORIES, n)
    initial = next_price(rng, n)
    now = cfg.timestamp(events)
    # nextAuctionLengthMs: on average the time it takes to create num_in_flight_auctions more auctions
    ahead = (cfg.num_in_flight_auctions * cfg.total_proportion) // cfg.auction_proportion
    horizon = cfg.timestamp(events + ahead) - now
    expires = now + 1 + rng.integers(0, np.maximum(horizon * 2, 1))
    names, descriptions = next_string(rng, 20, n), next_string(rng, 100, n)
    reserve = initial + next_price(rng, n)
    size = 8 + _lengths(names) + _lengths(descriptions) + 40
    return _table(
        "auction",
        events,
        {
            "id": last_base0_auction_id(cfg, events) + FIRST_AUCTION_ID,
            "itemName": names,
            "description": descriptions,
            "initialBid": initial,
            "reserve": reserve,
            "dateTime": now,
            "expires": expires,
            "seller": seller,
            "category": category,
            "extra": next_extra(rng, size, cfg.avg_auction_byte_size),
        },
    )


def _bids(cfg: GeneratorConfig, rng: np.random.Generator, events: np.ndarray) -> pa.Table:
    n = len(events)
    hot_auction = rng.integers(0, cfg.hot_auction_ratio, n) > 0
    hot = (last_base0_auction_id(cfg, events) // HOT_AUCTION_BATCH) * HOT_AUCTION_BATCH
    auction = np.where(hot_auction, hot, next_base0_auction_id(cfg, rng, events)) + FIRST_AUCTION_ID
    hot_bidder = rng.integers(0, cfg.hot_bidders_ratio, n) > 0
    hot = (last_base0_person_id(cfg, events) // HOT_BIDDER_BATCH) * HOT_BIDDER_BATCH + 1
    bidder = np.where(hot_bidder, hot, next_base0_person_id(cfg, rng, events)) + FIRST_PERSON_ID
    price = next_price(rng, n)
    hot_channel = rng.integers(0, 2, n) > 0
    channel = np.where(
        hot_channel,
        rng.integers(0, len(HOT_CHANNELS), n),
        len(HOT_CHANNELS) + rng.integers(0, NUM_CHANNELS, n),
    )
    names, urls = channels(cfg.seed)
    take = _ints(channel)
    return _table(
        "bid",
        events,
        {
            "auction": auction,
            "bidder": bidder,
            "price": price,
            "channel": names.take(take),
            "url": urls.take(take),
            "dateTime": cfg.timestamp(events),
            "extra": next_extra(rng, np.full(n, 32), cfg.avg_bid_byte_size),
        },
    )


# ---------------------------------------------------------------------- ranges, files and in-process use
def tables(cfg: GeneratorConfig, start: int, stop: int, with_event: bool = False) -> dict[str, pa.Table]:
    """Events ``start`` to ``stop - 1``, a table per kind in the contract's columns
    (``with_event``: with the event number first)."""
    out: dict[str, list[pa.Table]] = {kind: [] for kind in KINDS}
    for index in range(start // BLOCK_EVENTS, (stop - 1) // BLOCK_EVENTS + 1 if stop > start else 0):
        for kind, table in block(cfg, index).items():
            lo, hi = index * BLOCK_EVENTS, (index + 1) * BLOCK_EVENTS
            if start > lo or stop < hi:
                event = table.column("event")
                table = table.filter(pc.and_(pc.greater_equal(event, start), pc.less(event, stop)))
            out[kind].append(table)
    result = {}
    for kind, parts in out.items():
        table = (
            pa.concat_tables(parts) if parts else SCHEMAS[kind].insert(0, pa.field("event", pa.int64())).empty_table()
        )
        result[kind] = table if with_event else table.drop_columns(["event"])
    return result


def event_at(i: int, cfg: GeneratorConfig = GeneratorConfig()) -> tuple[str, dict[str, Any]]:
    """Event ``i`` as ``(kind, row)``: for ``env.from_generator(functools.partial(event_at,
    cfg=...), count=n)``. Computes (and caches) its block of 10,000 events."""
    kind = cfg.kind_of(i)
    table = block(cfg, i // BLOCK_EVENTS)[kind]
    first = table.column("event")[0].as_py()
    if kind == "bid":
        # bids are the events whose remainder is >= P + A; count those before i within the block
        row = _rank(cfg, i, first, cfg.person_proportion + cfg.auction_proportion, cfg.total_proportion)
    elif kind == "auction":
        row = _rank(cfg, i, first, cfg.person_proportion, cfg.person_proportion + cfg.auction_proportion)
    else:
        row = _rank(cfg, i, first, 0, cfg.person_proportion)
    found = table.slice(row, 1).to_pylist()[0]
    assert found.pop("event") == i
    return kind, found


def row_at(kind: str, j: int, cfg: GeneratorConfig = GeneratorConfig(), columns: tuple[str, ...] | None = None) -> dict:
    """The ``j``-th event of ``kind`` (0, 1, ...), as a row of ``columns`` (all by
    default): for one source per kind, ``env.from_generator(functools.partial(row_at,
    "bid", cfg=cfg), count=cfg.counts(n)["bid"])``."""
    p, a = cfg.person_proportion, cfg.auction_proportion
    lo, hi = {"person": (0, p), "auction": (p, p + a), "bid": (p + a, cfg.total_proportion)}[kind]
    epoch, within = divmod(j, hi - lo)
    _, row = event_at(epoch * cfg.total_proportion + lo + within, cfg)
    return row if columns is None else {c: row[c] for c in columns}


def _rank(cfg: GeneratorConfig, i: int, first: int, lo: int, hi: int) -> int:
    """How many events of remainder ``lo <= r < hi`` lie in ``[first, i)``."""

    def upto(n: int) -> int:  # in [0, n)
        epochs, rest = divmod(n, cfg.total_proportion)
        return epochs * (hi - lo) + min(max(rest - lo, 0), hi - lo)

    return upto(i) - upto(first)


def events(n: int, cfg: GeneratorConfig = GeneratorConfig(), start: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    """Events ``start`` to ``start + n - 1`` in order, as ``(kind, row)``: for
    ``env.from_collection(list(events(n)))`` or a plain loop."""
    stop = start + n
    for index in range(start // BLOCK_EVENTS, (stop - 1) // BLOCK_EVENTS + 1 if n > 0 else 0):
        lo = max(start, index * BLOCK_EVENTS)
        hi = min(stop, (index + 1) * BLOCK_EVENTS)
        rows = {kind: iter(t.to_pylist()) for kind, t in tables(cfg, lo, hi, with_event=True).items()}
        for i in range(lo, hi):
            row = next(rows[cfg.kind_of(i)])
            del row["event"]
            yield cfg.kind_of(i), row


def write(out: str, n: int, cfg: GeneratorConfig = GeneratorConfig(), events_per_part: int = 160_000) -> dict[str, Any]:
    """The first ``n`` events as ``out/{person,auction,bid}/part-NNNNN.parquet``:
    part ``k`` of each kind holds events ``k * events_per_part`` onwards, so the
    files of a kind are in event-time order by name. ``out/_nexmark.json`` says
    what was generated; a folder holding exactly that is left as it is (reuse)."""
    meta = {"events": n, "events_per_part": events_per_part, "config": asdict(cfg), "counts": cfg.counts(n)}
    existing = read_meta(out)
    if existing == meta:
        return meta
    if os.path.exists(out):
        for kind in KINDS:
            shutil.rmtree(os.path.join(out, kind), ignore_errors=True)
        if existing is not None:
            os.remove(os.path.join(out, META_FILE))
    for kind in KINDS:
        os.makedirs(os.path.join(out, kind), exist_ok=True)
    for part, lo in enumerate(range(0, n, events_per_part)):
        for kind, table in tables(cfg, lo, min(n, lo + events_per_part)).items():
            final = os.path.join(out, kind, f"part-{part:05d}.parquet")
            hidden = os.path.join(out, kind, f".part-{part:05d}.parquet.inprogress")
            pq.write_table(table, hidden, row_group_size=65_536)
            os.replace(hidden, final)
    with open(os.path.join(out, META_FILE + ".tmp"), "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(os.path.join(out, META_FILE + ".tmp"), os.path.join(out, META_FILE))
    return meta


def read_meta(out: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(out, META_FILE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def config_of(out: str) -> GeneratorConfig:
    """The generator settings a folder was written with."""
    meta = read_meta(out)
    if meta is None:
        raise FileNotFoundError(f"{out} holds no {META_FILE}: not written by bench.nexmark.generator")
    return GeneratorConfig(**meta["config"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, required=True, help="how many events (persons, auctions and bids together)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="the folder: person/, auction/, bid/ of part-*.parquet")
    ap.add_argument("--rate", type=int, default=10_000, help="events per second of event time (first-event.rate)")
    ap.add_argument("--events-per-part", type=int, default=160_000)
    args = ap.parse_args()
    started = time.perf_counter()
    meta = write(
        args.out, args.events, GeneratorConfig(seed=args.seed, events_per_second=args.rate), args.events_per_part
    )
    counts = ", ".join(f"{v:,} {k}s" for k, v in meta["counts"].items())
    print(f"{args.out}: {args.events:,} events ({counts}) in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
