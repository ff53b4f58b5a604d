"""The core of the stream API: the transformations a stream adds to its
environment's job graph (map, filter, process, key_by, a keyed reduce,
partitionings, sinks), each a :class:`Transformation` of an operator and its
inputs. PyFlink's surface is a layer over it: :mod:`weir.runtime.datastream`
holds the environment and the :class:`DataStream` and :class:`KeyedStream` a
user gets (this core, and the entry points of the builders in
:mod:`weir.runtime.windowed_streams` and :mod:`weir.runtime.connected_streams`).

The core does not know the classes it hands out: each new stream comes from
``_stream`` or ``_keyed_stream``, which PyFlink's classes define, and the type
parameters ``StreamT`` and ``KeyedT`` name those classes, so that a type checker
sees PyFlink's whole API on every result (``ds.map(f).key_by(k).window(w)``).
A stream knows its environment as a :class:`StreamEnvironment`: the
environment builds streams, so the streams cannot import it."""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Callable, Generic, Iterable, Protocol, TypeVar

from weir.runtime.batches import MapBatchesOperator
from weir.runtime.batches import batch_format as checked_batch_format
from weir.runtime.config import ExecutionConfig, _whole
from weir.runtime.errors import InvalidConfigurationError, InvalidJobGraphError
from weir.runtime.eventtime import TimestampsAndWatermarksOperator, WatermarkStrategy
from weir.runtime.functions import as_callable
from weir.runtime.graph import PartitionSpec, Transformation
from weir.runtime.operators import (
    FilterOperator,
    FlatMapOperator,
    KeyedProcessOperator,
    KeyedReduceOperator,
    MapOperator,
    ProcessOperator,
    StreamOperator,
)
from weir.runtime.row import Row, _make_row
from weir.runtime.sinks import PrintSink, Sink
from weir.runtime.typeinfo import TupleTypeInfo, TypeInformation, Types, output_type_arg, type_arg

StreamT = TypeVar("StreamT", bound="DataStreamCore[Any, Any]")  # the class of a new stream
KeyedT = TypeVar("KeyedT", bound="KeyedStreamCore[Any, Any]")  # the class of a new keyed stream
SelfT = TypeVar("SelfT", bound="DataStreamCore[Any, Any]")  # a setting's stream, returned as it is

Inputs = list[tuple[Transformation, PartitionSpec | None]]


class StreamEnvironment(Protocol):
    """What a stream asks of the environment that built it (the environment is
    :class:`weir.runtime.datastream.StreamExecutionEnvironment`)."""

    config: ExecutionConfig

    def _add(self, name: str, make: Callable[[str, str], StreamOperator], inputs: Inputs) -> Transformation:
        """A new operator reading ``inputs``, made on each subtask by ``make(name, uid)``."""
        ...

    def _add_sink(self, sink: Sink, inputs: Inputs) -> Transformation:
        """A sink reading ``inputs``, which the next ``execute()`` runs."""
        ...


class DataStreamCore(ABC, Generic[StreamT, KeyedT]):
    """A stream: its inputs (transformations, each with how its records are
    partitioned on the way) and the transformation that makes it, when one
    operator does (not after ``key_by``, ``union`` or a partitioning). Built by
    one thread, as its environment."""

    def __init__(
        self,
        env: StreamEnvironment,
        inputs: Inputs,
        transformation: Transformation | None,
    ) -> None:
        self._env = env
        self._inputs = inputs
        self._t = transformation

    @abstractmethod
    def _stream(self, inputs: Inputs, transformation: Transformation | None) -> StreamT:
        """A new stream of PyFlink's class."""

    @abstractmethod
    def _keyed_stream(self, inputs: Inputs, key_selector: Callable[[Any], Any]) -> KeyedT:
        """A new keyed stream of PyFlink's class."""

    # ------------------------------------------------------------ operator settings
    def _own(self, what: str) -> Transformation:
        if self._t is None:
            raise InvalidJobGraphError(
                f"{what} applies to an operator; call it right after map/filter/reduce/..., not after key_by/union/rebalance"
            )
        return self._t

    def set_parallelism(self: SelfT, parallelism: int) -> SelfT:
        self._own("set_parallelism()").parallelism = _whole("parallelism", parallelism)
        return self

    def set_max_parallelism(self: SelfT, max_parallelism: int) -> SelfT:
        self._own("set_max_parallelism()").max_parallelism = _whole("max_parallelism", max_parallelism)
        return self

    def name(self: SelfT, name: str) -> SelfT:
        self._own("name()").name = name
        return self

    def uid(self: SelfT, uid: str) -> SelfT:
        """A stable id: state is matched to operators by uid on restore."""
        if not uid or not isinstance(uid, str):
            raise InvalidConfigurationError("uid", uid, "must be a non-empty string")
        self._own("uid()").uid = uid
        return self

    def with_resources(
        self: SelfT,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
        memory: int | None = None,
        resources: dict[str, float] | None = None,
    ) -> SelfT:
        """Ray resources for each task actor running this operator (fractions
        allowed), e.g. ``.map(score).with_resources(num_gpus=1)`` or
        ``resources={"ssd": 1}``. A chain asks for the most of its operators' asks.
        A request no node of the cluster can ever meet fails at submission."""
        t = self._own("with_resources()")
        asks = {"num_cpus": num_cpus, "num_gpus": num_gpus, "memory": memory, **(resources or {})}
        for name, amount in asks.items():
            if amount is None:
                continue
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
                raise InvalidConfigurationError(f"resource {name}", amount, "must be a number of zero or more")
            t.resources[name] = float(amount)
        return self

    def get_name(self) -> str:
        return self._own("get_name()").name

    def get_type(self) -> TypeInformation:
        """The type declared for this stream's records (PyFlink's ``output_type=``,
        ``type_info=``; a side output's: its tag's), else ``Types.PICKLED_BYTE_ARRAY()``:
        any picklable object."""
        return self._declared_type() or Types.PICKLED_BYTE_ARRAY()

    def _declared_type(self) -> TypeInformation | None:
        t, spec = self._inputs[0]  # a union's streams have one type, as in PyFlink
        tag = _tag(spec)
        return t.record_types.main if tag is None else t.record_types.sides.get(tag)

    # ------------------------------------------------------------ transformations
    def _then(self, name: str, make: Callable[[str, str], StreamOperator], output_type: Any = None) -> StreamT:
        """A new operator reading this stream; ``output_type`` (PyFlink's) is its records' type."""
        t = self._env._add(name, make, list(self._inputs))
        t.record_types.main = output_type_arg(output_type, f"output_type of {name}")
        return self._stream([(t, None)], t)

    def map(self, func: Callable[[Any], Any] | Any, output_type: TypeInformation | None = None) -> StreamT:
        """``func(record)`` per record. With ``output_type`` (a :class:`TypeInformation`)
        each result is checked and converted to it, as PyFlink's serializer does
        (a ROW type takes :class:`Row` s and gives rows with its field names)."""
        call = as_callable(func, "map", "map()")
        return self._then("Map", lambda n, u: MapOperator(n, u, func, call), output_type)

    def flat_map(
        self, func: Callable[[Any], Iterable[Any]] | Any, output_type: TypeInformation | None = None
    ) -> StreamT:
        call = as_callable(func, "flat_map", "flat_map()")
        return self._then("FlatMap", lambda n, u: FlatMapOperator(n, u, func, call), output_type)

    def filter(self, func: Callable[[Any], bool] | Any) -> StreamT:
        """The records ``func`` keeps; they keep this stream's declared type, as in PyFlink."""
        call = as_callable(func, "filter", "filter()")
        return self._then("Filter", lambda n, u: FilterOperator(n, u, func, call), self._declared_type())

    def process(self, func: Any, output_type: TypeInformation | None = None) -> StreamT:
        call = as_callable(func, "process_element", "process()")
        return self._then("Process", lambda n, u: ProcessOperator(n, u, func, call), output_type)

    def map_batches(
        self,
        fn: Callable[[Any], Any] | type,
        batch_size: int = 1024,
        batch_format: str = "default",
        batch_timeout_ms: int | None = 100,
        fn_constructor_args: Iterable[Any] | None = None,
        fn_constructor_kwargs: dict[str, Any] | None = None,
        num_cpus: float | None = None,
        num_gpus: float | None = None,
    ) -> StreamT:
        """Ray Data's ``map_batches``: ``fn`` over batches of ``batch_size`` rows
        (dict records), given as ``batch_format`` ``"pyarrow"`` (a Table),
        ``"pandas"`` (a DataFrame) or ``"numpy"`` (``"default"``: a dict of
        arrays), returning a batch of that format whose rows are emitted. A class
        is constructed once per subtask (with ``fn_constructor_args`` /
        ``_kwargs``). ``num_cpus`` / ``num_gpus`` are :meth:`with_resources`'.
        Exactly-once: a partial batch goes through ``fn`` before each checkpoint
        barrier, before each watermark, at the end of input, and once its oldest
        row has waited ``batch_timeout_ms`` (None: never for that reason), so
        ``fn`` should compute each row from that row alone."""
        if not callable(fn):
            raise TypeError(f"map_batches() takes a function or a callable class, got {type(fn).__name__}")
        size = _whole("map_batches batch_size", batch_size)
        fmt = checked_batch_format(batch_format)
        timeout = None if batch_timeout_ms is None else _whole("map_batches batch_timeout_ms", batch_timeout_ms)
        args, kwargs = tuple(fn_constructor_args or ()), dict(fn_constructor_kwargs or {})
        if (args or kwargs) and not isinstance(fn, type):
            raise InvalidConfigurationError(
                "map_batches fn_constructor_args", args or kwargs, "fn is not a class to construct"
            )
        result = self._then("MapBatches", lambda n, u: MapBatchesOperator(n, u, fn, size, fmt, timeout, args, kwargs))
        if num_cpus is not None or num_gpus is not None:
            result.with_resources(num_cpus=num_cpus, num_gpus=num_gpus)
        return result

    def assign_timestamps_and_watermarks(self, watermark_strategy: WatermarkStrategy) -> StreamT:
        """Stamp records with event time and emit watermarks here, anywhere in the
        stream (``from_collection(data).map(parse).assign_timestamps_and_watermarks(ws)``):
        the assigner gives each record its timestamp (without one, records keep
        theirs), one watermark generator per subtask runs every auto-watermark
        interval, and watermarks from upstream are replaced by this strategy's."""
        if not isinstance(watermark_strategy, WatermarkStrategy):
            raise InvalidConfigurationError(
                "assign_timestamps_and_watermarks() strategy", watermark_strategy, "use WatermarkStrategy.for_...()"
            )
        config = self._env.config
        return self._then(
            "Timestamps/Watermarks",
            lambda n, u: TimestampsAndWatermarksOperator(n, u, watermark_strategy, config.watermark_interval_ms),
        )

    def transform(self, name: str, make_operator: Callable[[str, str], StreamOperator]) -> StreamT:
        """A custom :class:`StreamOperator`: ``make_operator(name, uid)`` builds one per
        subtask, on the task. The operator sees the whole lifecycle, watermarks included."""
        return self._then(name, make_operator)

    def key_by(self, key_selector: Callable[[Any], Any] | Any, key_type: TypeInformation | None = None) -> KeyedT:
        """Partition by ``key_selector(record)``. ``key_type`` (PyFlink's) is checked to be a
        type and not used: keys are hashed as Python values (see the key rules)."""
        type_arg(key_type, "key_by() key_type")
        ks = as_callable(key_selector, "get_key", "key_by()")
        return self._keyed_stream([(t, PartitionSpec("hash", ks, _tag(s))) for t, s in self._inputs], ks)

    def _two_inputs(
        self,
        second: DataStreamCore[Any, Any],
        name: str,
        make: Callable[[str, str], StreamOperator],
        output_type: Any = None,
    ) -> StreamT:
        """An operator whose first input is this stream and whose second is ``second``."""
        if second._env is not self._env:
            raise InvalidJobGraphError(f"{name}: connect() joins two streams of one StreamExecutionEnvironment")
        inputs: Inputs = [(t, _input(s, 0)) for t, s in self._inputs]
        inputs += [(t, _input(s, 1)) for t, s in second._inputs]
        t = self._env._add(name, make, inputs)
        t.record_types.main = output_type_arg(output_type, f"output_type of {name}")
        return self._stream([(t, None)], t)

    def union(self, *streams: DataStreamCore[Any, Any]) -> StreamT:
        inputs = list(self._inputs)
        for s in streams:
            inputs += s._inputs
        return self._stream(inputs, None)

    def _partition(self, kind: str) -> StreamT:
        return self._stream([(t, PartitionSpec(kind, None, _tag(s))) for t, s in self._inputs], None)

    def rebalance(self) -> StreamT:
        return self._partition("rebalance")

    def forward(self) -> StreamT:
        return self._partition("forward")

    def shuffle(self) -> StreamT:
        """Each record to a downstream subtask drawn at random."""
        return self._partition("shuffle")

    def rescale(self) -> StreamT:
        """Round-robin, as :meth:`rebalance`: weir has no local exchange for Flink's rescale to prefer."""
        return self._partition("rescale")

    def partition_custom(self, partitioner: Any, key_selector: Callable[[Any], Any] | Any) -> StreamT:
        """Each record to subtask ``partitioner(key, num_partitions)`` of its key
        (``key_selector``'s); ``partitioner`` is a callable or has PyFlink's ``partition`` method."""
        choose = as_callable(partitioner, "partition", "partition_custom()")
        select = as_callable(key_selector, "get_key", "partition_custom() key_selector")
        return self._stream(
            [(t, PartitionSpec("custom", select, _tag(s), custom=choose)) for t, s in self._inputs], None
        )

    def project(self, *field_indexes: int) -> StreamT:
        """The fields at ``field_indexes`` of each record of a TUPLE stream, as PyFlink's."""
        declared = self._declared_type()
        if not isinstance(declared, TupleTypeInfo):
            raise InvalidJobGraphError(
                f"project{field_indexes}: only a stream of a declared Types.TUPLE can be projected, this one is {declared!r}"
            )
        fields = declared.get_field_types()
        if not field_indexes or any(not isinstance(i, int) or not 0 <= i < len(fields) for i in field_indexes):
            raise InvalidConfigurationError(
                "project() field indexes", field_indexes, f"give fields of the tuple, 0..{len(fields) - 1}"
            )
        return self.map(
            lambda record: tuple(record[i] for i in field_indexes), Types.TUPLE([fields[i] for i in field_indexes])
        ).name("Projection")

    def force_non_parallel(self: SelfT) -> SelfT:
        """Run this operator as one subtask, now and after any rescale."""
        return self.set_parallelism(1).set_max_parallelism(1)

    # ------------------------------------------------------------ sinks
    def sink_to(self, sink: Sink) -> StreamT:
        if not isinstance(sink, Sink):
            raise TypeError(f"sink_to() takes a weir.runtime.sinks.Sink, got {type(sink).__name__}")
        t = self._env._add_sink(sink, list(self._inputs))
        return self._stream([(t, None)], t)

    def add_sink(self, sink_func: Sink) -> StreamT:
        """PyFlink's name for :meth:`sink_to`: ``sink_func`` is a weir :class:`Sink`
        (weir has no legacy Java ``SinkFunction``)."""
        return self.sink_to(sink_func)

    def print(self, sink_identifier: str | None = None) -> StreamT:
        """Print each record (see :class:`PrintSink`: PyFlink's format)."""
        return self.sink_to(PrintSink(sink_identifier, self._declared_type()))


class KeyedStreamCore(DataStreamCore[StreamT, KeyedT]):
    """A stream partitioned by ``key_selector``: its operators have the key's
    state and timers."""

    def __init__(
        self,
        env: StreamEnvironment,
        inputs: Inputs,
        key_selector: Callable[[Any], Any],
    ) -> None:
        super().__init__(env, inputs, None)
        self._key_selector = key_selector

    def reduce(self, func: Callable[[Any, Any], Any] | Any) -> StreamT:
        """A running reduce per key: emits the new aggregate for every record
        (in BATCH mode, as Flink's: each key's final aggregate once, at the end
        of input). Its records have this stream's declared type, as in PyFlink."""
        call = as_callable(func, "reduce", "reduce()")
        ks = self._key_selector
        return self._then("Reduce", lambda n, u: KeyedReduceOperator(n, u, func, call, ks), self._declared_type())

    def map(self, func: Callable[[Any], Any] | Any, output_type: TypeInformation | None = None) -> StreamT:
        """As :meth:`DataStream.map`, keyed as in PyFlink: the function has the
        key's state (``get_state`` on the context ``open`` gets)."""
        f = as_callable(func, "map", "map()")
        return self._keyed("Map", func, lambda v, ctx: (f(v),), "map function", output_type)

    def flat_map(
        self, func: Callable[[Any], Iterable[Any]] | Any, output_type: TypeInformation | None = None
    ) -> StreamT:
        """As :meth:`DataStream.flat_map`, with the key's state (see :meth:`map`)."""
        f = as_callable(func, "flat_map", "flat_map()")
        return self._keyed("FlatMap", func, lambda v, ctx: f(v), "flat_map function", output_type)

    def filter(self, func: Callable[[Any], bool] | Any) -> StreamT:
        """As :meth:`DataStream.filter`, with the key's state (see :meth:`map`)."""
        f = as_callable(func, "filter", "filter()")
        return self._keyed(
            "Filter", func, lambda v, ctx: (v,) if f(v) else (), "filter function", self._declared_type()
        )

    def _keyed(self, name: str, func: Any, call: Callable[[Any, Any], Any], role: str, output_type: Any) -> StreamT:
        """An operator that calls ``call(record, ctx)`` with the record's key current."""
        ks = self._key_selector
        return self._then(name, lambda n, u: KeyedProcessOperator(n, u, func, call, ks, role), output_type)

    def sum(self, position_to_sum: int | str = 0) -> StreamT:
        """Running sum of field ``position_to_sum`` per key (a tuple's or a Row's index, a
        Row's field name, a dict's key; a record that is a number is summed whole); the
        other fields come from the key's first record. In BATCH mode each key's final
        sum only, as :meth:`reduce`."""
        return self.reduce(_fold_field(position_to_sum, operator.add)).name("Sum")

    def min(self, position_to_min: int | str = 0) -> StreamT:
        """Running minimum of a field per key (see :meth:`sum`), the other fields the first record's."""
        return self.reduce(_fold_field(position_to_min, min)).name("Min")

    def max(self, position_to_max: int | str = 0) -> StreamT:
        """Running maximum of a field per key (see :meth:`sum`), the other fields the first record's."""
        return self.reduce(_fold_field(position_to_max, max)).name("Max")

    def min_by(self, position_to_min_by: int | str = 0) -> StreamT:
        """Per key, the record with the smallest field so far (the first of equal ones)."""
        return self.reduce(_pick_by(position_to_min_by, operator.lt)).name("MinBy")

    def max_by(self, position_to_max_by: int | str = 0) -> StreamT:
        """Per key, the record with the largest field so far (the first of equal ones)."""
        return self.reduce(_pick_by(position_to_max_by, operator.gt)).name("MaxBy")

    def _repartition(self, *args: Any) -> StreamT:
        raise InvalidJobGraphError(
            "a keyed stream's records go to the subtask of their key: rebalance(), broadcast(), forward(), shuffle(), "
            "rescale() and partition_custom() apply to a stream before key_by(), as in PyFlink"
        )

    rebalance = forward = shuffle = rescale = partition_custom = _repartition  # type: ignore[assignment]

    def process(self, func: Any, output_type: TypeInformation | None = None) -> StreamT:
        """A :class:`KeyedProcessFunction` (or a callable ``(value, ctx) -> iterable``)."""
        call = as_callable(func, "process_element", "process()")
        return self._keyed("KeyedProcess", func, call, "process function", output_type)


def _field(record: Any, position: int | str) -> Any:
    """Field ``position`` of a tuple, list, Row or dict; a scalar record is its own field."""
    if isinstance(record, (tuple, list)):
        return record[_index(record, position)]
    return record[position] if isinstance(record, (Row, dict)) else record


def _index(record: tuple[Any, ...] | list[Any], position: int | str) -> int:
    if not isinstance(position, int):
        raise TypeError(f"field {position!r} of a {type(record).__name__} record {record!r}: give the field's index")
    return position


def _with_field(record: Any, position: int | str, value: Any) -> Any:
    """``record`` with field ``position`` set to ``value`` (a copy: records are never changed in place)."""
    if isinstance(record, Row):
        values, names = list(record), record._fields or []
        if not isinstance(position, int) and position not in names:
            raise TypeError(f"field {position!r} of Row {record!r}: its fields are {names}")
        values[position if isinstance(position, int) else names.index(position)] = value
        return _make_row(record._fields, values, record.get_row_kind())
    if isinstance(record, (tuple, list)):
        i = _index(record, position)
        changed = [*record[:i], value, *record[i + 1 :]]
        return tuple(changed) if isinstance(record, tuple) else changed
    if isinstance(record, dict):
        return {**record, position: value}
    return value


def _fold_field(position: int | str, combine: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def fold(a: Any, b: Any) -> Any:
        return _with_field(a, position, combine(_field(a, position), _field(b, position)))

    return fold


def _pick_by(position: int | str, better: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def pick(a: Any, b: Any) -> Any:
        return b if better(_field(b, position), _field(a, position)) else a

    return pick


def _tag(spec: PartitionSpec | None) -> str | None:
    return None if spec is None else spec.side_output


def _input(spec: PartitionSpec | None, index: int) -> PartitionSpec:
    return replace(spec or PartitionSpec(""), input_index=index)
