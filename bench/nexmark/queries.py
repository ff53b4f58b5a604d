"""Nexmark's queries q0-q8, q11, q12 and q20 in weir's PyFlink API, written as a
PyFlink user writes them (``pyflink`` replaced by ``weir`` in the imports).

Each ``qN(env, source)`` builds the query on ``env`` and returns its output
stream; :func:`run` adds a sink and executes it. The input is Nexmark's three
tables, read with ``FileSource`` over the Parquet files of
:mod:`bench.nexmark.generator` (:class:`ParquetInput`; only the columns the query
needs, the projection Flink SQL pushes into its source) or generated in-process
(:class:`GeneratedInput`, ``env.from_generator``). Event time is ``dateTime``,
with watermarks 4 s behind (Nexmark's DDL); checkpoints every second.

Semantics follow Nexmark's SQL (nexmark/nexmark, ``nexmark-flink/.../queries``);
the outputs, field by field, are those of :mod:`bench.nexmark.reference`. Where a
query differs from the SQL, its docstring says how and why.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import pyarrow as pa

from bench.nexmark import generator
from bench.nexmark.reference import (
    CATEGORY,
    COLUMNS,
    EURO_RATE,
    LAST_WINNERS,
    Q2_MODULUS,
    Q3_STATES,
    SIZE_MS,
    SLIDE_MS,
)
from weir import CoGroupFunction  # PyFlink's DataStream API has no co_group; weir has Flink Java's
from weir.common import Duration, Types, WatermarkStrategy
from weir.common.watermark_strategy import TimestampAssigner
from weir.connectors.files import BulkWriter, BulkWriterFactory, committed_files
from weir.datastream import (
    AggregateFunction,
    DataStream,
    FlatMapFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
)
from weir.datastream.connectors.file_system import FileSink, FileSource, OutputFileConfig
from weir.datastream.formats.parquet import ParquetColumnarRowInputFormat
from weir.datastream.state import ListStateDescriptor, ValueStateDescriptor
from weir.datastream.window import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

CHECKPOINT_INTERVAL_MS = 1000


class DateTime(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int | None) -> int:
        return value["dateTime"]


WATERMARKS = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(4)).with_timestamp_assigner(DateTime())


# ---------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class ParquetInput:
    """The folder of :func:`bench.nexmark.generator.write`: a ``FileSource`` per kind."""

    folder: str

    def stream(self, env: StreamExecutionEnvironment, kind: str, columns: list[str]) -> DataStream:
        schema = pa.schema([generator.SCHEMAS[kind].field(c) for c in columns])
        source = FileSource.for_bulk_file_format(
            ParquetColumnarRowInputFormat(schema), os.path.join(self.folder, kind)
        ).build()
        return env.from_source(source, WATERMARKS, f"{kind}s")


@dataclass(frozen=True)
class GeneratedInput:
    """The first ``events`` events of the generator, made in-process: one
    ``from_generator`` source per kind; ``events_per_second`` (of wall time, all
    kinds together) slows them down, for tests that kill tasks mid-job."""

    events: int
    config: generator.GeneratorConfig = generator.GeneratorConfig()
    events_per_second: float | None = None

    def stream(self, env: StreamExecutionEnvironment, kind: str, columns: list[str]) -> DataStream:
        row = functools.partial(generator.row_at, kind, cfg=self.config, columns=tuple(columns))
        count = self.config.counts(self.events)[kind]
        rate = None if self.events_per_second is None else self.events_per_second * count / self.events
        return env.from_generator(row, count=count, records_per_second=rate, watermark_strategy=WATERMARKS)


Input = ParquetInput | GeneratedInput


def _read(env: StreamExecutionEnvironment, source: Input, query: str, kind: str) -> DataStream:
    return source.stream(env, kind, COLUMNS[query][kind])


# ---------------------------------------------------------------------- q0-q2: stateless
def q0(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Pass-through: every bid."""
    bids = _read(env, source, "q0", "bid")
    return bids.map(lambda b: (b["auction"], b["bidder"], b["price"], b["dateTime"], b["extra"]))


def q1(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Currency conversion: each bid's price in euros (``0.908 * price``; the SQL's
    DECIMAL(23, 3) is a float here)."""
    bids = _read(env, source, "q1", "bid")
    return bids.map(lambda b: (b["auction"], b["bidder"], EURO_RATE * b["price"], b["dateTime"], b["extra"]))


def q2(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Selection: bids on auctions whose id is a multiple of 123."""
    bids = _read(env, source, "q2", "bid")
    return bids.filter(lambda b: b["auction"] % Q2_MODULUS == 0).map(lambda b: (b["auction"], b["price"]))


# ---------------------------------------------------------------------- q3, q20: regular joins
class SellerOfAuction(KeyedCoProcessFunction):
    """Persons (input 1) and auctions (input 2) keyed by person id and seller: a
    person is kept; an auction before its seller waits for them."""

    def open(self, runtime_context: Any) -> None:
        self.person = runtime_context.get_state(ValueStateDescriptor("person", Types.PICKLED_BYTE_ARRAY()))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting-auctions", Types.LONG()))

    def process_element1(self, person: dict, ctx: Any) -> Iterable[tuple]:
        seller = (person["name"], person["city"], person["state"])
        self.person.update(seller)
        for auction in self.waiting.get():
            yield (*seller, auction)
        self.waiting.clear()

    def process_element2(self, auction: dict, ctx: Any) -> Iterable[tuple]:
        seller = self.person.value()
        if seller is None:
            self.waiting.add(auction["id"])
        else:
            yield (*seller, auction["id"])


def q3(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Local item suggestion: persons of OR, ID or CA with their auctions of
    category 10, as ``(name, city, state, auction)``: Nexmark's unbounded join, so
    each side's matching rows stay in state."""
    persons = _read(env, source, "q3", "person").filter(lambda p: p["state"] in Q3_STATES)
    auctions = _read(env, source, "q3", "auction").filter(lambda a: a["category"] == CATEGORY)
    return persons.connect(auctions).key_by(lambda p: p["id"], lambda a: a["seller"]).process(SellerOfAuction())


class AuctionOfBid(KeyedCoProcessFunction):
    """Bids (input 1) and auctions (input 2) keyed by auction id. An auction of
    category 10 is kept; of another category, only that it is not one, so its bids
    are dropped at once; a bid before its auction waits for it."""

    def open(self, runtime_context: Any) -> None:
        self.auction = runtime_context.get_state(ValueStateDescriptor("auction", Types.PICKLED_BYTE_ARRAY()))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting-bids", Types.PICKLED_BYTE_ARRAY()))

    def process_element1(self, bid: dict, ctx: Any) -> Iterable[tuple]:
        auction = self.auction.value()
        if auction is None:
            self.waiting.add(bid)
        elif auction:
            yield _joined(bid, auction)

    def process_element2(self, auction: dict, ctx: Any) -> Iterable[tuple]:
        if auction["category"] != CATEGORY:
            self.auction.update(False)
        else:
            self.auction.update(auction)
            for bid in self.waiting.get():
                yield _joined(bid, auction)
        self.waiting.clear()


def _joined(b: dict, a: dict) -> tuple:
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


def q20(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Bids joined with their auction, for auctions of category 10 (the 16 fields of
    Nexmark's q20). Differs: Flink SQL pushes the filter into the auction side, so
    its join keeps every bid of every other auction in state for ever; here the
    join sees every auction and drops the bids of other categories."""
    bids = _read(env, source, "q20", "bid")
    auctions = _read(env, source, "q20", "auction")
    return bids.connect(auctions).key_by(lambda b: b["auction"], lambda a: a["id"]).process(AuctionOfBid())


# ---------------------------------------------------------------------- q4, q6: winning bids
class WinningBid(KeyedCoProcessFunction):
    """Auctions (input 1) and bids (input 2) keyed by auction id: the highest bid
    made while the auction ran (``dateTime <= bid <= expires``), emitted when the
    watermark passes the auction's expiry, as ``(auction, seller, category, price,
    expires)`` stamped with the expiry. Bids that come before their auction wait
    for it; a closed auction is remembered so its late bids are dropped."""

    CLOSED = ()

    def open(self, runtime_context: Any) -> None:
        self.auction = runtime_context.get_state(ValueStateDescriptor("auction", Types.PICKLED_BYTE_ARRAY()))
        self.best = runtime_context.get_state(ValueStateDescriptor("best-price", Types.LONG()))
        self.early = runtime_context.get_list_state(ListStateDescriptor("early-bids", Types.PICKLED_BYTE_ARRAY()))

    def process_element1(self, auction: dict, ctx: Any) -> None:
        start, expires = auction["dateTime"], auction["expires"]
        best = None
        for at, price in self.early.get():
            if start <= at <= expires and (best is None or price > best):
                best = price
        self.early.clear()
        if best is not None:
            self.best.update(best)
        self.auction.update((auction["seller"], auction["category"], start, expires))
        ctx.timer_service().register_event_time_timer(expires)

    def process_element2(self, bid: dict, ctx: Any) -> None:
        auction = self.auction.value()
        if auction is None:
            self.early.add((bid["dateTime"], bid["price"]))
        elif auction != self.CLOSED and auction[2] <= bid["dateTime"] <= auction[3]:
            best = self.best.value()
            if best is None or bid["price"] > best:
                self.best.update(bid["price"])

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[tuple]:
        seller, category, _, expires = self.auction.value()
        best = self.best.value()
        if best is not None:
            yield ctx.get_current_key(), seller, category, best, expires
        self.auction.update(self.CLOSED)
        self.best.clear()


def winning_bids(env: StreamExecutionEnvironment, source: Input, query: str) -> DataStream:
    auctions = _read(env, source, query, "auction")
    bids = _read(env, source, query, "bid")
    return auctions.connect(bids).key_by(lambda a: a["id"], lambda b: b["auction"]).process(WinningBid())


def q4(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Average price per category: the running average of the winning bids of
    each category's closed auctions, ``(category, average)``, one update per
    closed auction (Flink SQL's AVG retracts and re-emits likewise). Differs: an
    auction counts once it closes (the watermark passes its expiry), where the SQL
    join updates an auction's maximum with every bid and retracts the old one."""
    return (
        winning_bids(env, source, "q4")
        .map(lambda w: (w[2], w[3], 1))
        .key_by(lambda c: c[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1], a[2] + b[2]))
        .map(lambda c: (c[0], c[1] / c[2]))
    )


class AverageOfLastWinners(KeyedProcessFunction):
    """Winning bids keyed by seller, in the order their auctions close (expiry,
    then auction id: each waits for the watermark to pass its expiry, so the order
    does not depend on how the winners arrive); for each, the average of the
    seller's last 10 winning prices."""

    def open(self, runtime_context: Any) -> None:
        self.closing = runtime_context.get_list_state(ListStateDescriptor("closing", Types.PICKLED_BYTE_ARRAY()))
        self.last = runtime_context.get_state(ValueStateDescriptor("last-prices", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, winner: tuple, ctx: Any) -> None:
        self.closing.add(winner)
        ctx.timer_service().register_event_time_timer(winner[4])

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[tuple]:
        ready, later = [], []
        for w in self.closing.get():
            (ready if w[4] <= timestamp else later).append(w)
        self.closing.update(later)
        prices = list(self.last.value() or ())
        for w in sorted(ready, key=lambda w: (w[4], w[0])):
            prices = (prices + [w[3]])[-LAST_WINNERS:]
            yield w[1], sum(prices) / len(prices)
        self.last.update(tuple(prices))


def q6(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Average selling price by seller: for each auction that closes with a
    winning bid, ``(seller, average of the seller's last 10 winning prices)``.
    Differs: the SQL's ``OVER (... ORDER BY B.dateTime ROWS BETWEEN 10 PRECEDING
    AND CURRENT ROW)`` orders by the winning bid's time and spans 11 rows (Flink
    SQL cannot run it on the updating top-1); here the winners go in the order
    their auctions close, which a stream knows as it goes, and the last 10, as
    Nexmark's original (Beam) query has it."""
    return winning_bids(env, source, "q6").key_by(lambda w: w[1]).process(AverageOfLastWinners())


# ---------------------------------------------------------------------- q5, q7, q8, q11, q12: windows
class CountBids(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


class WithWindowEnd(ProcessWindowFunction):
    def process(self, key: Any, context: Any, counts: Iterable[int]) -> Iterable[tuple]:
        for n in counts:
            yield key, n, context.window().end


class HotItems(ProcessWindowFunction):
    """The auctions with the most bids of one sliding window (all its counts come
    stamped with the window's last millisecond, so one tumbling window holds them)."""

    def process(self, key: Any, context: Any, counts: Iterable[tuple]) -> Iterable[tuple]:
        counts = list(counts)
        top = max(c[1] for c in counts)
        yield from (c for c in counts if c[1] == top)


def q5(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Hot items: bids per auction in sliding windows of 10 s every 2 s, and per
    window the auctions with the most, as ``(auction, bids, window end)`` (the SQL
    gives ``(auction, num)``; the window end makes the check exact)."""
    bids = _read(env, source, "q5", "bid")
    return (
        bids.key_by(lambda b: b["auction"])
        .window(SlidingEventTimeWindows.of(Duration.of_millis(SIZE_MS), Duration.of_millis(SLIDE_MS)))
        .aggregate(CountBids(), window_function=WithWindowEnd())
        .key_by(lambda c: c[2])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(SLIDE_MS)))
        .process(HotItems())
    )


class InWindows(FlatMapFunction):
    """A bid in its 10 s window, as ``(window end, bid, True)``; a bid made exactly
    at a window's end is also a candidate of the window before: ``(end, bid, False)``."""

    def flat_map(self, b: dict) -> Iterable[tuple]:
        bid = (b["auction"], b["price"], b["bidder"], b["dateTime"], b["extra"])
        t = b["dateTime"]
        yield t - t % SIZE_MS + SIZE_MS, bid, True
        if t % SIZE_MS == 0:
            yield t, bid, False


class HighestBid(KeyedProcessFunction):
    """Keyed by window end: keeps the window's highest price and the bids at it,
    and emits them (with the candidates at that price made at the window's end)
    when the watermark passes the window's end."""

    def open(self, runtime_context: Any) -> None:
        self.best = runtime_context.get_state(ValueStateDescriptor("best", Types.PICKLED_BYTE_ARRAY()))
        self.edge = runtime_context.get_list_state(ListStateDescriptor("at-the-end", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: tuple, ctx: Any) -> None:
        end, bid, inside = value
        if not inside:
            self.edge.add(bid)
            best = self.best.value()
            if best is None:
                self.best.update((None, []))
                ctx.timer_service().register_event_time_timer(end)
            return
        best = self.best.value()
        if best is None:
            ctx.timer_service().register_event_time_timer(end)
            self.best.update((bid[1], [bid]))
        elif best[0] is None or bid[1] > best[0]:
            self.best.update((bid[1], [bid]))
        elif bid[1] == best[0]:
            best[1].append(bid)
            self.best.update(best)

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[tuple]:
        price, bids = self.best.value()
        yield from bids
        yield from (bid for bid in self.edge.get() if bid[1] == price)
        self.best.clear()
        self.edge.clear()


def q7(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Highest bid: the bids at the highest price of each 10 s tumbling window,
    ``(auction, price, bidder, dateTime, extra)``, with the SQL's inclusive upper
    bound (a bid at exactly a window's end also counts for that window)."""
    bids = _read(env, source, "q7", "bid")
    return bids.flat_map(InWindows()).key_by(lambda w: w[0]).process(HighestBid())


class NewSellers(CoGroupFunction):
    def co_group(self, persons: list[dict], auctions: list[dict]) -> Iterable[tuple]:
        if auctions:
            for p in persons:
                yield p["id"], p["name"], p["dateTime"] - p["dateTime"] % SIZE_MS


def q8(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """Monitor new users: persons who opened an auction in the 10 s tumbling window
    they joined in, ``(id, name, window start)``, once per person and window (the
    SQL groups each side by id and window before joining; a co-group does that)."""
    persons = _read(env, source, "q8", "person")
    auctions = _read(env, source, "q8", "auction")
    return (
        persons.co_group(auctions)
        .where(lambda p: p["id"])
        .equal_to(lambda a: a["seller"])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(SIZE_MS)))
        .apply(NewSellers())
    )


class WindowBounds(ProcessWindowFunction):
    def process(self, key: Any, context: Any, counts: Iterable[int]) -> Iterable[tuple]:
        window = context.window()
        for n in counts:
            yield key, n, window.start, window.end


def q11(env: StreamExecutionEnvironment, source: Input) -> DataStream:
    """User sessions: bids per bidder per session window (gap 10 s), ``(bidder,
    bids, start, end)``."""
    bids = _read(env, source, "q11", "bid")
    return (
        bids.key_by(lambda b: b["bidder"])
        .window(EventTimeSessionWindows.with_gap(Duration.of_millis(SIZE_MS)))
        .aggregate(CountBids(), window_function=WindowBounds())
    )


def q12(env: StreamExecutionEnvironment, source: Input, window_ms: int = SIZE_MS) -> DataStream:
    """Processing-time windows: bids per bidder per 10 s of processing time,
    ``(bidder, bids, start, end)``. As in Flink, windows still open when the
    input ends do not fire (a test shortens them with ``window_ms``)."""
    bids = _read(env, source, "q12", "bid")
    return (
        bids.key_by(lambda b: b["bidder"])
        .window(TumblingProcessingTimeWindows.of(Duration.of_millis(window_ms)))
        .aggregate(CountBids(), window_function=WindowBounds())
    )


QUERIES: dict[str, Callable[..., DataStream]] = {
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


# ---------------------------------------------------------------------- output and running
class PickledBatches(BulkWriterFactory):
    """Each batch the sink gets, pickled whole into the part file: about the
    cheapest exactly-once output there is, so the sink costs the query little."""

    def create(self) -> BulkWriter:
        return _PickleWriter()


class _PickleWriter(BulkWriter):
    def start(self, stream: Any) -> None:
        self._stream = stream

    def add_elements(self, records: list[Any]) -> None:
        self._stream.write(pickle.dumps(list(records), protocol=pickle.HIGHEST_PROTOCOL))

    def finish(self) -> None:
        pass


def output_sink(folder: str) -> FileSink:
    """An exactly-once sink into ``folder`` (part files committed by checkpoints)."""
    config = OutputFileConfig.builder().with_part_prefix("out").with_part_suffix(".pkl").build()
    return FileSink.for_bulk_format(folder, PickledBatches()).with_output_file_config(config).build()


_PART = re.compile(r"out-([0-9a-f]+)-(\d+)-(\d+)\.pkl$")


def read_output(folder: str) -> list[Any]:
    """What ``output_sink(folder)`` committed: each subtask's records in the order
    it wrote them (subtask by subtask)."""

    def order(path: str) -> tuple[int, int]:
        m = _PART.search(path)
        assert m is not None, path
        return int(m.group(2)), int(m.group(3))

    out: list[Any] = []
    for path in sorted(committed_files(output_sink(folder)), key=order):
        with open(path, "rb") as f:
            while True:
                try:
                    out.extend(pickle.load(f))
                except EOFError:
                    break
    return out


def environment(parallelism: int, checkpoint_storage: str | None = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(CHECKPOINT_INTERVAL_MS)
    if checkpoint_storage is not None:
        env.get_checkpoint_config().set_checkpoint_storage(checkpoint_storage)
    return env


@dataclass
class Run:
    query: str
    parallelism: int
    seconds: float  # the whole execute()
    steady_s: float | None  # from the first record any task saw to the last one
    output: list[Any]
    result: Any


def build(
    query: str, source: Input, parallelism: int, out: str, checkpoint_storage: str | None = None, **options: Any
) -> StreamExecutionEnvironment:
    """An environment with ``query`` (``options`` to its function) into ``output_sink(out)``."""
    env = environment(parallelism, checkpoint_storage)
    QUERIES[query](env, source, **options).sink_to(output_sink(out)).name("out")  # type: ignore[call-arg]
    return env


def run(
    query: str,
    source: Input,
    parallelism: int,
    out: str,
    executor: str | None = None,
    checkpoint_storage: str | None = None,
    **options: Any,
) -> Run:
    """Build ``query``, execute it (on Ray, or ``executor="local"`` in-process) into
    an output sink at ``out``, and read back what it committed."""
    env = build(query, source, parallelism, out, checkpoint_storage, **options)
    name = f"nexmark-{query}-p{parallelism}-{time.time_ns()}"
    started = time.perf_counter()
    result = env.execute(name) if executor is None else env.execute(name, executor=executor)
    seconds = time.perf_counter() - started
    firsts = [m["first_record_at"] for m in result.metrics if m.get("first_record_at")]
    lasts = [m["last_record_at"] for m in result.metrics if m.get("last_record_at")]
    steady = max(lasts) - min(firsts) if firsts and lasts else None
    return Run(query, parallelism, seconds, steady, read_output(out), result)
