"""Files: a two-phase-commit sink for JSON lines, text and Parquet on any
pyarrow.fs, and (from :mod:`weir.connectors.file_source`) the file source: PyFlink's
``pyflink.datastream.connectors.file_system`` module.

Exactly-once when checkpointing is on (a bounded job also commits its last data
through its final checkpoint). A subtask writes into a hidden in-progress part
file; a checkpoint closes it and renames it to a hidden pending file, kept in the
checkpoint's state (on an object store, S3 or GCS, where an upload is invisible
until it completes and a rename is a copy, it is written under its pending name
from the start) (a rolling policy's ``part_size`` also rolls a file to pending
between checkpoints); when the checkpoint completes its pending files are renamed
to their visible names. A restore publishes what the restored checkpoint had
pending, and the first checkpoint after it removes the hidden leftovers of earlier
attempts. Readers (Spark, pandas, :func:`read_committed`) see only committed
files: names starting with ``.`` or ``_`` are hidden by convention.

Part files are named ``{prefix}-{attempt}-{subtask}-{counter}{suffix}``
(:class:`OutputFileConfig`); while hidden they also carry the id of the job's run,
so that a sink's cleanup only ever removes what its own run left: never the
pending files of another job's savepoint, or of an earlier run of this job. One
running job writes to a folder at a time: a second one is refused when it is
submitted (``Sink.exclusive_location``).
"""

from __future__ import annotations

import codecs
import json
import posixpath
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from weir.connectors.file_source import (
    BulkFormat,
    FileSource,
    FileSourceBuilder,
    StreamFormat,
    resolve,
)
from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.operators import OperatorContext
from weir.runtime.sinks import Sink, SinkWriter
from weir.runtime.storage import appears_whole

_FORMATS = {"jsonl": ".jsonl", "parquet": ".parquet"}
_PARQUET_ROW_GROUP = 65536


# ---------------------------------------------------------------------- row formats
class Encoder(ABC):
    """How a row-format FileSink writes each record (PyFlink's ``Encoder``, from
    ``pyflink.common``). ``decode`` reads a part file it wrote back, for
    :func:`read_committed`."""

    @abstractmethod
    def encode(self, value: Any) -> bytes: ...

    def encode_batch(self, values: list[Any]) -> bytes:
        """The bytes of ``values``, one after another: exactly
        ``b"".join(encode(v) for v in values)``. The FileSink calls it once per
        batch; an encoder that knows a faster way to the same bytes overrides it.
        (With a rolling ``part_size``, the FileSink encodes the batch that fills a
        file again, record by record, to find the record the file ends at.)"""
        return b"".join(map(self.encode, values))

    def decode(self, data: bytes) -> list[Any]:
        """The records of a part file this encoder wrote: its lines, by default."""
        return _lines(data.decode())

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        """``str(record)`` and a newline, in ``charset_name`` (Flink's ``SimpleStringEncoder``)."""
        return SimpleStringEncoder(charset_name)


class SimpleStringEncoder(Encoder):
    def __init__(self, charset_name: str = "UTF-8") -> None:
        try:
            codecs.lookup(charset_name)
        except LookupError:
            raise InvalidConfigurationError("charset_name", charset_name, "Python knows no such codec") from None
        self.charset_name = charset_name

    def encode(self, value: Any) -> bytes:
        return (str(value) + "\n").encode(self.charset_name)

    def encode_batch(self, values: list[Any]) -> bytes:
        """One encode of the batch's text, where the charset encodes a text in
        parts to the bytes it gives the whole (UTF-16 starts every part with a
        byte-order mark); a record it cannot encode fails as :meth:`encode` does."""
        if not self._fast():
            return super().encode_batch(values)
        try:
            return "".join([str(v) + "\n" for v in values]).encode(self.charset_name)
        except UnicodeEncodeError:
            return super().encode_batch(values)

    def _fast(self) -> bool:
        return (
            type(self).encode is SimpleStringEncoder.encode
            and codecs.lookup(self.charset_name).name in _CONCATENATING_CODECS
        )

    def decode(self, data: bytes) -> list[Any]:
        return _lines(data.decode(self.charset_name))


class JsonLinesEncoder(Encoder):
    """Each record as one line of JSON (weir's; ``FileSink(path, format="jsonl")``)."""

    def encode(self, value: Any) -> bytes:
        return (json.dumps(value) + "\n").encode()

    def encode_batch(self, values: list[Any]) -> bytes:
        """The same bytes as :meth:`encode` record by record, from one C-level
        ``json.dumps`` of the whole batch when every record is a list or tuple
        (or every one a dict): see :func:`_json_lines`."""
        if type(self).encode is not JsonLinesEncoder.encode:  # a subclass's encode decides its bytes
            return super().encode_batch(values)
        return _json_lines(values)

    def decode(self, data: bytes) -> list[Any]:
        return [json.loads(line) for line in _lines(data.decode()) if line]


# Codecs that encode a text in parts to the bytes of the whole (codecs.lookup names).
_CONCATENATING_CODECS = frozenset({"utf-8", "ascii", "iso8859-1"})

# json.dumps's encoder without its check for circular references (a dict of every
# container it is in, updated at each one: a third of its time on short tuples).
# A circular record recurses until RecursionError instead, and the record-by-record
# path then refuses it with json.dumps's own ValueError.
_BATCH_JSON = json.JSONEncoder(check_circular=False)

# The records' kinds, what json.dumps writes between two of them in a list, and the
# same with a newline between the records.
_JSON_JOINS = (((list, tuple), "], [", "]\n["), ((dict,), "}, {", "}\n{"))


def _batches_faster(encoder: Encoder) -> bool:
    """Whether ``encoder.encode_batch`` is faster than ``encode`` record by
    record: then a rolling FileSink encodes each batch at once (and the batch
    that fills a file again, record by record); else it encodes each record once."""
    kind = type(encoder)
    if isinstance(encoder, JsonLinesEncoder) and kind.encode_batch is JsonLinesEncoder.encode_batch:
        return kind.encode is JsonLinesEncoder.encode
    if isinstance(encoder, SimpleStringEncoder) and kind.encode_batch is SimpleStringEncoder.encode_batch:
        return encoder._fast()
    return kind.encode_batch is not Encoder.encode_batch  # the user's own


def _json_lines(values: list[Any]) -> bytes:
    """``json.dumps(v) + "\\n"`` of each value, UTF-8, joined.

    ``json.dumps`` of a list is ``"[" + ", ".join(json.dumps(v) for v in it) +
    "]"`` (the same encoder, the same separators at every depth), and its
    output is ASCII. So when every record is a list or tuple, the batch's text
    holds ``"], ["`` at each of the n - 1 places between two records, and
    maybe elsewhere too (inside a record: a nested list, a string). When it
    holds it exactly n - 1 times, those are the places, and putting a newline
    there gives each record's line; any other count takes the record-by-record
    path. Likewise ``"}, {"`` for dicts. A record ``json.dumps`` refuses is
    refused by the record-by-record path, with its own error (a circular one
    too: see ``_BATCH_JSON``)."""
    if values:
        kinds = set(map(type, values))
        for bases, between, newline in _JSON_JOINS:
            if all(issubclass(kind, bases) for kind in kinds):
                try:
                    text = _BATCH_JSON.encode(values)
                except (TypeError, ValueError, RecursionError):
                    break
                if text.count(between) == len(values) - 1:
                    return (text[1:-1].replace(between, newline) + "\n").encode()
                break
    return "".join([json.dumps(v) + "\n" for v in values]).encode()


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


# ---------------------------------------------------------------------- bulk formats
class BulkWriter(ABC):
    """Writes one subtask's part files of a bulk format, one file at a time."""

    @abstractmethod
    def start(self, stream: Any) -> None:
        """A new part file begins on ``stream``."""

    @abstractmethod
    def add_elements(self, records: list[Any]) -> None: ...

    @abstractmethod
    def finish(self) -> None:
        """Write what is buffered and the file's footer; the caller closes the stream."""


class BulkWriterFactory(ABC):
    """What ``FileSink.for_bulk_format`` takes (PyFlink's ``BulkWriterFactory``):
    makes each subtask's writer. Parquet's is ``ParquetBulkWriters.for_row_type``
    (:mod:`weir.connectors.formats`)."""

    @abstractmethod
    def create(self) -> BulkWriter: ...


class ParquetWriterFactory(BulkWriterFactory):
    """Dict records become named columns, tuples ``f0, f1, ...``, other values
    ``value``; with ``schema`` None, a subtask's first rows set it."""

    def __init__(self, schema: pa.Schema | None = None) -> None:
        self.schema = schema

    def create(self) -> BulkWriter:
        return _ParquetWriter(self.schema)


class _ParquetWriter(BulkWriter):
    def __init__(self, schema: pa.Schema | None) -> None:
        self._schema = schema
        self._stream: Any = None
        self._rows: list[Any] = []
        self._parquet: pq.ParquetWriter | None = None

    def start(self, stream: Any) -> None:
        self._stream = stream

    def add_elements(self, records: list[Any]) -> None:
        self._rows.extend(records)
        if len(self._rows) >= _PARQUET_ROW_GROUP:
            self._write_row_group()

    def _write_row_group(self) -> None:
        table = _to_table(self._rows, self._schema)
        if self._parquet is None:
            self._schema = self._schema or table.schema
            self._parquet = pq.ParquetWriter(self._stream, self._schema)
        self._parquet.write_table(table.cast(self._schema))
        self._rows = []

    def finish(self) -> None:
        if self._rows or self._parquet is None:
            self._write_row_group()
        self._parquet.close()  # type: ignore[union-attr]
        self._parquet = None


# ---------------------------------------------------------------------- names and rolling
@dataclass(frozen=True)
class OutputFileConfig:
    """Part file names, ``{part_prefix}-{attempt}-{subtask}-{counter}{part_suffix}``
    (PyFlink's ``OutputFileConfig``; Flink's middle part is a subtask uid)."""

    part_prefix: str = "part"
    part_suffix: str = ""

    def __post_init__(self) -> None:
        if not self.part_prefix or self.part_prefix.startswith((".", "_")) or "/" in self.part_prefix:
            raise InvalidConfigurationError(
                "OutputFileConfig part_prefix",
                self.part_prefix,
                "must be a non-empty name without / that does not start with . or _ (those are hidden)",
            )
        if "/" in self.part_suffix:
            raise InvalidConfigurationError("OutputFileConfig part_suffix", self.part_suffix, "must not contain /")

    @staticmethod
    def builder() -> OutputFileConfigBuilder:
        return OutputFileConfigBuilder()

    def get_part_prefix(self) -> str:
        return self.part_prefix

    def get_part_suffix(self) -> str:
        return self.part_suffix


class OutputFileConfigBuilder:
    def __init__(self) -> None:
        self.part_prefix = "part"
        self.part_suffix = ""

    def with_part_prefix(self, prefix: str) -> OutputFileConfigBuilder:
        self.part_prefix = prefix
        return self

    def with_part_suffix(self, suffix: str) -> OutputFileConfigBuilder:
        self.part_suffix = suffix
        return self

    def build(self) -> OutputFileConfig:
        return OutputFileConfig(self.part_prefix, self.part_suffix)


@dataclass(frozen=True)
class RollingPolicy:
    """When a part file is closed and the next begins (PyFlink's ``RollingPolicy``):
    at every checkpoint always, and with ``part_size`` also once a file has that
    many bytes."""

    part_size: int | None = None

    @staticmethod
    def default_rolling_policy(
        part_size: int = 1024 * 1024 * 128, rollover_interval: int = 60 * 1000, inactivity_interval: int = 60 * 1000
    ) -> RollingPolicy:
        """Roll at ``part_size`` bytes. ``rollover_interval`` and
        ``inactivity_interval`` (ms) are accepted and not used: weir rolls at every
        checkpoint, so a file is open one checkpoint interval at most."""
        if isinstance(part_size, bool) or not isinstance(part_size, int) or part_size <= 0:
            raise InvalidConfigurationError("RollingPolicy part_size", part_size, "must be a positive int of bytes")
        return DefaultRollingPolicy(part_size)

    @staticmethod
    def on_checkpoint_rolling_policy() -> RollingPolicy:
        return OnCheckpointRollingPolicy()


class DefaultRollingPolicy(RollingPolicy):
    pass


class OnCheckpointRollingPolicy(RollingPolicy):
    pass


# ---------------------------------------------------------------------- the sink
class RowFormatBuilder:
    """PyFlink's ``FileSink.RowFormatBuilder``; rolls at 128 MiB by default, as Flink's."""

    def __init__(self, base_path: str, encoder: Encoder) -> None:
        if not isinstance(encoder, Encoder):
            raise TypeError(
                "for_row_format() takes an Encoder (e.g. Encoder.simple_string_encoder()), "
                f"got {type(encoder).__name__}"
            )
        self._path = base_path
        self._encoder = encoder
        self._config = OutputFileConfig()
        self._policy = RollingPolicy.default_rolling_policy()

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> RowFormatBuilder:
        self._config = output_file_config
        return self

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> RowFormatBuilder:
        if not isinstance(rolling_policy, RollingPolicy):
            raise TypeError(f"with_rolling_policy() takes a RollingPolicy, got {type(rolling_policy).__name__}")
        self._policy = rolling_policy
        return self

    def build(self) -> FileSink:
        return FileSink._built(self._path, self._encoder, self._config, self._policy)


class BulkFormatBuilder:
    """PyFlink's ``FileSink.BulkFormatBuilder``: a bulk file rolls at checkpoints only."""

    def __init__(self, base_path: str, writer_factory: BulkWriterFactory) -> None:
        if not isinstance(writer_factory, BulkWriterFactory):
            raise TypeError(
                "for_bulk_format() takes a BulkWriterFactory (e.g. ParquetBulkWriters.for_row_type()), "
                f"got {type(writer_factory).__name__}"
            )
        self._path = base_path
        self._factory = writer_factory
        self._config = OutputFileConfig()

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> BulkFormatBuilder:
        self._config = output_file_config
        return self

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> BulkFormatBuilder:
        if not isinstance(rolling_policy, OnCheckpointRollingPolicy):
            raise InvalidConfigurationError(
                "FileSink rolling policy",
                rolling_policy,
                "a bulk format rolls at checkpoints only: use RollingPolicy.on_checkpoint_rolling_policy()",
            )
        return self

    def build(self) -> FileSink:
        return FileSink._built(self._path, self._factory, self._config, OnCheckpointRollingPolicy())


class FileSink(Sink):
    """Part files in a folder, exactly-once (see the module's doc). ``FileSink(path,
    format="jsonl" | "parquet", schema=None)`` names files ``part-...jsonl`` or
    ``part-...parquet`` and rolls at checkpoints only; PyFlink's builders
    :meth:`for_row_format` and :meth:`for_bulk_format` choose names and rolling."""

    def __init__(self, path: str, format: str = "jsonl", schema: pa.Schema | None = None) -> None:
        if format not in _FORMATS:
            raise InvalidConfigurationError("FileSink format", format, f"use one of {', '.join(_FORMATS)}")
        writes = JsonLinesEncoder() if format == "jsonl" else ParquetWriterFactory(schema)
        self._setup(path, writes, OutputFileConfig("part", _FORMATS[format]), OnCheckpointRollingPolicy())

    def _setup(
        self, path: str, writes: Encoder | BulkWriterFactory, config: OutputFileConfig, policy: RollingPolicy
    ) -> None:
        resolve(path, "FileSink path")
        self.path = path
        self.writes = writes
        self.output_file_config = config
        self.rolling_policy = policy

    @classmethod
    def _built(
        cls, path: str, writes: Encoder | BulkWriterFactory, config: OutputFileConfig, policy: RollingPolicy
    ) -> FileSink:
        sink = cls.__new__(cls)
        sink._setup(path, writes, config, policy)
        return sink

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> RowFormatBuilder:
        return RowFormatBuilder(base_path, encoder)

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: BulkWriterFactory) -> BulkFormatBuilder:
        return BulkFormatBuilder(base_path, writer_factory)

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        fs, base = resolve(self.path, "FileSink path")
        fs.create_dir(base, recursive=True)
        return _FileWriter(fs, base, self, ctx)

    def exclusive_location(self) -> str:
        """Part files are named by attempt and subtask: a second FileSink of the
        job on this folder would pick the same names, and a second running job's
        restore would publish or drop what this one has pending."""
        fs, base = resolve(self.path, "FileSink path")
        base = posixpath.normpath(base)
        return f"folder {base}" if fs.type_name == "local" else f"folder {fs.type_name}://{base}"


class _FileWriter(SinkWriter):
    def __init__(self, fs: pafs.FileSystem, base: str, sink: FileSink, ctx: OperatorContext) -> None:
        self._fs = fs
        self._base = base
        self._ctx = ctx
        self._config = sink.output_file_config
        self._part_size = sink.rolling_policy.part_size
        self._encoder = sink.writes if isinstance(sink.writes, Encoder) else None
        self._bulk = sink.writes.create() if isinstance(sink.writes, BulkWriterFactory) else None
        self._batches = self._encoder is not None and _batches_faster(self._encoder)
        prefix, suffix = re.escape(self._config.part_prefix), re.escape(self._config.part_suffix)
        self._run = ctx.run_id
        self._hidden = re.compile(
            rf"^\.{prefix}-([0-9a-f]+)-(\d+)-\d+{suffix}\.{re.escape(self._run)}\.(inprogress|pending)$"
        )
        self._counter = 0
        self._stream: Any = None
        self._name = ""
        self._size = 0  # bytes of the part file being written, row formats
        self._rolled: list[tuple[str, str]] = []  # (pending, final) of the files closed since the last checkpoint
        self._cleaned = False
        # On an object store an unfinished upload is invisible and a rename is a
        # copy: a part file is written under its pending name from the start.
        self._writing = "pending" if appears_whole(fs) else "inprogress"

    # ---------------------------------------------------------------- writing
    def write(self, records: list[Any]) -> None:
        if self._bulk is not None:
            if self._stream is None:
                self._open()
            self._bulk.add_elements(records)
            return
        assert self._encoder is not None
        if not records:
            return
        if self._part_size is not None and not self._batches:
            self._write_rolling(records)  # no faster way to the bytes: each record encoded once, as it comes
            return
        data = self._encoder.encode_batch(records)
        if self._part_size is not None and self._size + len(data) >= self._part_size:
            self._write_rolling(records)  # a record of this batch fills the file: find which
            return
        self._size += len(data)
        (self._stream or self._open()).write(data)

    def _write_rolling(self, records: list[Any]) -> None:
        """Record by record, rolling after the record that brings the file to
        ``part_size`` bytes."""
        assert self._encoder is not None and self._part_size is not None
        chunk: list[bytes] = []
        for record in records:
            chunk.append(self._encoder.encode(record))
            self._size += len(chunk[-1])
            if self._size >= self._part_size:
                self._append(chunk)
                chunk = []
                self._roll()
        if chunk:
            self._append(chunk)

    def _append(self, chunk: list[bytes]) -> None:
        (self._stream or self._open()).write(b"".join(chunk))

    def _open(self) -> Any:
        c = self._config
        self._name = f"{c.part_prefix}-{self._ctx.attempt_id}-{self._ctx.subtask}-{self._counter}{c.part_suffix}"
        self._counter += 1
        self._stream = self._fs.open_output_stream(self._hidden_path(self._writing))
        if self._bulk is not None:
            self._bulk.start(self._stream)
        return self._stream

    def _roll(self) -> None:
        """Close the part file; it is pending until the next checkpoint completes."""
        if self._bulk is not None:
            self._bulk.finish()
        self._stream.close()
        self._stream = None
        self._size = 0
        pending = self._hidden_path("pending")
        if self._writing != "pending":
            self._fs.move(self._hidden_path(self._writing), pending)
        self._rolled.append((pending, self._path(self._name)))

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        if self._stream is not None:
            self._roll()
        rolled, self._rolled = self._rolled, []
        return rolled

    # ---------------------------------------------------------------- committing
    def commit(self, committables: list[Any]) -> None:
        for pending, final in committables:
            info = self._fs.get_file_info([pending, final])
            if info[0].type == pafs.FileType.File:
                self._fs.move(pending, final)
            elif info[1].type != pafs.FileType.File:
                raise FileNotFoundError(f"pending file {pending} vanished before it was committed as {final}")

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """Delete the unpublished files earlier attempts of this run's subtask left
        (and, subtask 0, of subtasks a rescale removed). Never another live
        subtask's (with region failover, subtasks run different attempts), nor
        another run's (its savepoint may still publish them)."""
        if self._cleaned:
            return
        self._cleaned = True
        ctx = self._ctx
        for info in self._fs.get_file_info(pafs.FileSelector(self._base)):
            m = self._hidden.match(info.base_name)
            if (
                m
                and m.group(1) != ctx.attempt_id
                and (int(m.group(2)) == ctx.subtask or (ctx.subtask == 0 and int(m.group(2)) >= ctx.parallelism))
            ):
                self._fs.delete_file(info.path)

    def close(self) -> None:
        if self._stream is not None:
            if self._bulk is not None:
                self._bulk.finish()
            self._stream.close()
            self._stream = None

    def _path(self, name: str) -> str:
        return posixpath.join(self._base, name)

    def _hidden_path(self, stage: str) -> str:
        return self._path(f".{self._name}.{self._run}.{stage}")


def _to_table(rows: list[Any], schema: pa.Schema | None) -> pa.Table:
    if rows and isinstance(rows[0], dict):
        return pa.Table.from_pylist(rows, schema=schema)
    if rows and isinstance(rows[0], (tuple, list)):
        cols = _columns(rows)
        names = schema.names if schema is not None else [f"f{i}" for i in range(len(cols))]
        return pa.Table.from_arrays([pa.array(c) for c in cols], names=names)
    return pa.Table.from_arrays([pa.array(rows)], names=schema.names if schema is not None else ["value"])


def _columns(rows: list[Any]) -> list[Any]:
    """``zip(*rows)``'s columns, taken by index when every row is a plain tuple or
    list of one width (several times faster than unpacking a row group into
    ``zip``'s arguments); other rows go through ``zip``, which iterates them and
    cuts every column to the shortest."""
    width = len(rows[0])
    if set(map(type, rows)) <= {tuple, list} and set(map(len, rows)) == {width}:
        return [list(map(itemgetter(i), rows)) for i in range(width)]
    return list(zip(*rows))


def committed_files(target: str | FileSink) -> list[str]:
    """The visible (committed) part files of a FileSink, sorted; given a path, those
    named as ``FileSink(path)`` names them (``part-...``)."""
    path, config = (target, OutputFileConfig()) if isinstance(target, str) else (target.path, target.output_file_config)
    fs, base = resolve(path)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except FileNotFoundError:  # being created right now
        return []
    return sorted(
        i.path
        for i in infos
        if i.type == pafs.FileType.File
        and i.base_name.startswith(config.part_prefix + "-")
        and i.base_name.endswith(config.part_suffix)
    )


def read_committed(target: str | FileSink) -> list[Any]:
    """Every committed record of a FileSink: Parquet rows as dicts, row formats as
    their encoder reads them back (JSON lines parsed, a SimpleStringEncoder's
    lines as str). Given a path: the files of ``FileSink(path, format=...)``, by
    their extension."""
    sink = target if isinstance(target, FileSink) else None
    fs, _ = resolve(target.path if isinstance(target, FileSink) else target)
    out: list[Any] = []
    for p in committed_files(target):
        encoder = sink.writes if sink is not None else None if p.endswith(".parquet") else JsonLinesEncoder()
        if isinstance(encoder, Encoder):
            with fs.open_input_stream(p) as f:
                out.extend(encoder.decode(f.read()))
        else:
            with fs.open_input_file(p) as f:
                out.extend(pq.read_table(f).to_pylist())
    return out


__all__ = [
    # PyFlink's pyflink.datastream.connectors.file_system, with weir's Encoder and read-back helpers
    "BulkFormat",
    "FileSource",
    "FileSourceBuilder",
    "StreamFormat",
    "FileSink",
    "RowFormatBuilder",
    "BulkFormatBuilder",
    "OutputFileConfig",
    "OutputFileConfigBuilder",
    "RollingPolicy",
    "DefaultRollingPolicy",
    "OnCheckpointRollingPolicy",
    "Encoder",
    "SimpleStringEncoder",
    "JsonLinesEncoder",
    "BulkWriter",
    "BulkWriterFactory",
    "ParquetWriterFactory",
    "committed_files",
    "read_committed",
    "resolve",
]
