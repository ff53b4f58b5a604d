"""File formats with PyFlink's names (``pyflink.datastream.formats.csv`` and
``.parquet``): CSV read as a stream format, Parquet read and written through
pyarrow. Column types are Python types and pyarrow schemas, as weir has no
``DataTypes``. Nothing read is unpickled (pyarrow>=15 does not load pickled
extension types)."""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from weir.connectors.file_source import BulkFormat, FileRecords, FileSplit, Lines, StreamFormat
from weir.connectors.files import BulkWriterFactory, ParquetWriterFactory
from weir.runtime.errors import InvalidConfigurationError, MalformedInputError

# ---------------------------------------------------------------------- CSV
_BOOLEANS = {"true": True, "false": False}


def _convert(kind: type) -> Callable[[str], Any]:
    if kind is bool:
        return lambda text: _BOOLEANS[text.strip().lower()]
    if kind in (str, int, float):
        return kind
    raise InvalidConfigurationError("CSV column type", kind, "use str, int, float or bool")


@dataclass(frozen=True)
class CsvColumn:
    name: str
    kind: type  # str, int, float, bool; list for an array column
    element_type: type = str
    separator: str = ";"  # between an array column's elements

    def parse(self, text: str) -> Any:
        if self.kind is list:
            convert = _convert(self.element_type)
            return [convert(part) for part in text.split(self.separator)] if text else []
        return _convert(self.kind)(text)


@dataclass(frozen=True)
class CsvSchema:
    """The columns and dialect of CSV files (PyFlink's ``CsvSchema``); build one
    with :meth:`builder`. A field equal to ``null_value`` is None; an empty field
    of a column that is not a string one is None too."""

    columns: tuple[CsvColumn, ...]
    column_separator: str = ","
    quote_char: str | None = '"'
    escape_char: str | None = None
    null_value: str | None = None
    allow_comments: bool = False
    use_header: bool = False
    skip_first_data_row: bool = False
    strict_headers: bool = False

    @staticmethod
    def builder() -> CsvSchemaBuilder:
        return CsvSchemaBuilder()

    def size(self) -> int:
        return len(self.columns)

    def __len__(self) -> int:
        return self.size()


class CsvSchemaBuilder:
    """PyFlink's ``CsvSchemaBuilder``; types are Python types (``int``, ``float``,
    ``str``, ``bool``) where PyFlink takes ``DataTypes``."""

    def __init__(self) -> None:
        self._schema = CsvSchema(())

    def _set(self, **changes: Any) -> CsvSchemaBuilder:
        self._schema = replace(self._schema, **changes)
        return self

    def _add(self, column: CsvColumn) -> CsvSchemaBuilder:
        return self._set(columns=self._schema.columns + (column,))

    def add_string_column(self, name: str) -> CsvSchemaBuilder:
        return self._add(CsvColumn(name, str))

    def add_number_column(self, name: str, number_type: type = int) -> CsvSchemaBuilder:
        if number_type not in (int, float):
            raise InvalidConfigurationError(f"CSV column {name!r} number_type", number_type, "use int or float")
        return self._add(CsvColumn(name, number_type))

    def add_boolean_column(self, name: str) -> CsvSchemaBuilder:
        return self._add(CsvColumn(name, bool))

    def add_array_column(self, name: str, separator: str = ";", element_type: type = str) -> CsvSchemaBuilder:
        _convert(element_type)
        return self._add(CsvColumn(name, list, element_type, separator))

    def add_columns_from(self, schema: CsvSchema) -> CsvSchemaBuilder:
        return self._set(columns=self._schema.columns + schema.columns)

    def clear_columns(self) -> CsvSchemaBuilder:
        return self._set(columns=())

    def set_column_separator(self, char: str) -> CsvSchemaBuilder:
        return self._set(column_separator=_one_char("column separator", char))

    def set_quote_char(self, char: str) -> CsvSchemaBuilder:
        return self._set(quote_char=_one_char("quote char", char))

    def disable_quote_char(self) -> CsvSchemaBuilder:
        return self._set(quote_char=None)

    def set_escape_char(self, char: str) -> CsvSchemaBuilder:
        return self._set(escape_char=_one_char("escape char", char))

    def disable_escape_char(self) -> CsvSchemaBuilder:
        return self._set(escape_char=None)

    def set_null_value(self, null_value: str) -> CsvSchemaBuilder:
        return self._set(null_value=null_value)

    def set_allow_comments(self, allow: bool = True) -> CsvSchemaBuilder:
        """Skip lines starting with ``#``."""
        return self._set(allow_comments=allow)

    def set_use_header(self, use: bool = True) -> CsvSchemaBuilder:
        """Each file's first line is a header, not a record."""
        return self._set(use_header=use)

    def set_strict_headers(self, strict: bool = True) -> CsvSchemaBuilder:
        """The header must name the schema's columns, in order."""
        return self._set(strict_headers=strict)

    def set_skip_first_data_row(self, skip: bool = True) -> CsvSchemaBuilder:
        return self._set(skip_first_data_row=skip)

    def build(self) -> CsvSchema:
        if not self._schema.columns:
            raise InvalidConfigurationError("CsvSchema columns", (), "add at least one column")
        return self._schema

    def size(self) -> int:
        return len(self._schema.columns)

    def __len__(self) -> int:
        return self.size()


def _one_char(setting: str, char: str) -> str:
    if len(char) != 1:
        raise InvalidConfigurationError(f"CSV {setting}", char, "must be a single character")
    return char


class CsvReaderFormat(StreamFormat):
    """CSV files as dict records ``{column: value}`` (PyFlink's ``CsvReaderFormat``,
    whose records are named ``Row``\\ s). Quoted fields may span lines. A line with
    the wrong number of fields or a value of the wrong type fails the reading task
    naming the file, the line and the column."""

    def __init__(self, schema: CsvSchema, charset_name: str = "UTF-8") -> None:
        super().__init__(charset_name)
        self.schema = schema

    @staticmethod
    def for_schema(schema: CsvSchema) -> CsvReaderFormat:
        return CsvReaderFormat(schema)

    def records(self, lines: Lines) -> Iterator[Any]:
        s = self.schema
        names = [c.name for c in s.columns]
        at_start = lines.number == 0  # else a restore resumed past the header
        header, skip = s.use_header and at_start, s.skip_first_data_row and at_start
        source = (line for line in lines if not line.startswith("#")) if s.allow_comments else lines
        rows = csv.reader(
            source,
            delimiter=s.column_separator,
            quotechar=s.quote_char,
            escapechar=s.escape_char,
            quoting=csv.QUOTE_MINIMAL if s.quote_char else csv.QUOTE_NONE,
            strict=True,
        )
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as exc:
                raise lines.malformed(f"not CSV ({exc})") from None
            if not row:
                continue  # a blank line
            if header:
                if s.strict_headers and row != names:
                    raise lines.malformed(f"the header is not the schema's columns {names}", row)
                header = False
                continue
            if skip:
                skip = False
                continue
            if len(row) != len(names):
                raise lines.malformed(f"{len(row)} fields where the schema has {len(names)} ({', '.join(names)})", row)
            yield {c.name: self._value(c, text, lines) for c, text in zip(s.columns, row)}

    def _value(self, column: CsvColumn, text: str, lines: Lines) -> Any:
        if text == self.schema.null_value or (text == "" and column.kind is not str):
            return None
        try:
            return column.parse(text)
        except (ValueError, KeyError):
            raise lines.malformed(f"column {column.name!r} is not {column.kind.__name__}", text) from None


# ---------------------------------------------------------------------- Parquet
class ParquetColumnarRowInputFormat(BulkFormat):
    """Parquet files read through pyarrow a row group at a time, rows as dicts
    (PyFlink's ``ParquetColumnarRowInputFormat``). ``row_type``: a
    ``pyarrow.Schema``: the columns to read, cast to its types (PyFlink: a
    ``RowType``); None reads every column as stored. At most ``batch_size`` rows
    go out per batch. A restore resumes at the checkpointed row group and row.

    A file larger than ``split_bytes`` (weir's; 32 MiB, Flink's local block size)
    is read in parts of that many bytes, each by whichever reader asks for it, so
    readers share a large file: a part reads the row groups whose middle byte lies
    in it (as Flink and Spark cut Parquet), and a part with none reads nothing.
    None reads each file whole."""

    def __init__(
        self, row_type: pa.Schema | None = None, batch_size: int = 2048, *, split_bytes: int | None = 32 << 20
    ) -> None:
        for setting, value in (("batch_size", batch_size), ("split_bytes", split_bytes)):
            if value is None and setting == "split_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidConfigurationError(
                    f"ParquetColumnarRowInputFormat {setting}", value, "must be a positive int"
                )
        self.row_type = row_type
        self.batch_size = batch_size
        self.split_bytes = split_bytes

    def open(self, fs: pafs.FileSystem, split: FileSplit) -> FileRecords:
        return _ParquetRecords(self, fs, split)


class _ParquetRecords(FileRecords):
    def __init__(self, fmt: ParquetColumnarRowInputFormat, fs: pafs.FileSystem, split: FileSplit) -> None:
        self._format = fmt
        self._split = split
        self._row = split.records  # of the first group to read: the one a restore resumes in
        self._table: pa.Table | None = None  # the row group being read
        self._stream = fs.open_input_file(split.path)
        try:
            self._file = pq.ParquetFile(self._stream)
        except pa.ArrowException as exc:
            self._stream.close()
            raise MalformedInputError(f"file {split.path}", "its footer", f"not Parquet ({exc})") from None
        meta = self._file.metadata
        groups = range(split.offset, meta.num_row_groups)
        if split.part is not None:
            start, end = split.part
            # The parts cover the file's bytes: a middle a writer's odd offsets put outside them
            # goes to the part of the last byte, never to none.
            last = self._stream.size() - 1
            groups = [g for g in groups if start <= min(_middle(meta.row_group(g)), last) < end]  # type: ignore[assignment]
        self._groups, self._next = list(groups), 0  # the row groups left to read, and the one being read

    def read(self, max_records: int) -> tuple[list[Any], bool]:
        while self._next < len(self._groups):
            if self._table is None:
                self._table = self._read_group(self._groups[self._next])
            if self._row < self._table.num_rows:
                rows = self._table.slice(self._row, min(max_records, self._format.batch_size)).to_pylist()
                self._row += len(rows)
                return rows, False
            self._next, self._row, self._table = self._next + 1, 0, None
        return [], True

    def _read_group(self, group: int) -> pa.Table:
        schema = self._format.row_type
        try:
            table = self._file.read_row_group(group, columns=None if schema is None else schema.names)
            return table if schema is None else table.select(schema.names).cast(schema)
        except (pa.ArrowException, KeyError) as exc:
            raise MalformedInputError(f"file {self._split.path}", f"row group {group}", str(exc)) from None

    def position(self) -> FileSplit:
        done = self._next >= len(self._groups)
        group = self._file.metadata.num_row_groups if done else self._groups[self._next]
        return replace(self._split, offset=group, records=self._row)

    def close(self) -> None:
        self._stream.close()


def _middle(group: Any) -> int:
    """The byte in the middle of a row group's column chunks (a file part reads the
    row groups whose middle lies in it)."""
    chunks = [group.column(c) for c in range(group.num_columns)]
    start = min(c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in chunks)
    return start + sum(c.total_compressed_size for c in chunks) // 2  # type: ignore[no-any-return]


class ParquetBulkWriters:
    """PyFlink's ``ParquetBulkWriters``: ``FileSink.for_bulk_format(path,
    ParquetBulkWriters.for_row_type(schema))``."""

    @staticmethod
    def for_row_type(row_type: pa.Schema | None = None) -> BulkWriterFactory:
        """``row_type``: a ``pyarrow.Schema`` (PyFlink: a ``RowType``); None takes
        each subtask's first rows' schema."""
        return ParquetWriterFactory(row_type)
