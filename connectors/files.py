"""Files: a two-phase-commit sink for JSON lines and Parquet on any pyarrow.fs.

Exactly-once when checkpointing is on (a bounded job also commits its last data
through its final checkpoint). A subtask writes into a hidden in-progress part
file; a checkpoint closes it and renames it to a hidden pending file, kept in the
checkpoint's state; when the checkpoint completes the pending file is renamed to
its visible name. A restore publishes what the restored checkpoint had pending,
and the first checkpoint after it removes the hidden leftovers of earlier
attempts. Readers (Spark, pandas, :func:`read_committed`) see only committed
files: names starting with ``.`` or ``_`` are hidden by convention.

One job writes to a folder at a time.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from runtime.errors import InvalidConfigurationError
from runtime.operators import OperatorContext
from runtime.sinks import Sink, SinkWriter

_FORMATS = {"jsonl": ".jsonl", "parquet": ".parquet"}
_HIDDEN = re.compile(r"^\.part-([0-9a-f]+)-(\d+)-\d+\.")
_PARQUET_ROW_GROUP = 65536


def resolve(path: str) -> tuple[pafs.FileSystem, str]:
    uri = path if "://" in path else "file://" + os.path.abspath(path)
    try:
        return pafs.FileSystem.from_uri(uri)
    except Exception as exc:
        raise InvalidConfigurationError("FileSink path", path, f"pyarrow.fs cannot open it ({exc})") from None


class FileSink(Sink):
    def __init__(self, path: str, format: str = "jsonl", schema: pa.Schema | None = None) -> None:
        if format not in _FORMATS:
            raise InvalidConfigurationError("FileSink format", format, f"use one of {', '.join(_FORMATS)}")
        resolve(path)
        self.path = path
        self.format = format
        self.schema = schema

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        fs, base = resolve(self.path)
        fs.create_dir(base, recursive=True)
        return _FileWriter(fs, base, self.format, self.schema, ctx)

    def exclusive_location(self) -> str:
        """Part files are named by attempt and subtask: a second FileSink of the
        job on this folder would pick the same names."""
        fs, base = resolve(self.path)
        return f"{fs.type_name}:{posixpath.normpath(base)}"


class _FileWriter(SinkWriter):
    def __init__(self, fs: pafs.FileSystem, base: str, fmt: str, schema: pa.Schema | None, ctx: OperatorContext) -> None:
        self._fs = fs
        self._base = base
        self._fmt = fmt
        self._schema = schema
        self._ctx = ctx
        self._counter = 0
        self._stream: Any = None
        self._name = ""
        self._rows: list[Any] = []
        self._parquet: pq.ParquetWriter | None = None
        self._cleaned = False

    # ---------------------------------------------------------------- writing
    def write(self, records: list[Any]) -> None:
        if self._stream is None:
            self._name = f"part-{self._ctx.attempt_id}-{self._ctx.subtask}-{self._counter}{_FORMATS[self._fmt]}"
            self._counter += 1
            self._stream = self._fs.open_output_stream(self._path("." + self._name + ".inprogress"))
        if self._fmt == "jsonl":
            self._stream.write("".join(json.dumps(r) + "\n" for r in records).encode())
        else:
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

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        if self._stream is None:
            return []
        if self._fmt == "parquet":
            if self._rows or self._parquet is None:
                self._write_row_group()
            self._parquet.close()  # type: ignore[union-attr]
            self._parquet = None
        self._stream.close()
        self._stream = None
        pending = self._path("." + self._name + ".pending")
        self._fs.move(self._path("." + self._name + ".inprogress"), pending)
        return [(pending, self._path(self._name))]

    # ---------------------------------------------------------------- committing
    def commit(self, committables: list[Any]) -> None:
        for pending, final in committables:
            info = self._fs.get_file_info([pending, final])
            if info[0].type == pafs.FileType.File:
                self._fs.move(pending, final)
            elif info[1].type != pafs.FileType.File:
                raise FileNotFoundError(f"pending file {pending} vanished before it was committed as {final}")

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """Delete the unpublished files earlier attempts of this subtask left (and,
        subtask 0, of subtasks a rescale removed). Never another live subtask's:
        with region failover, subtasks run different attempts."""
        if self._cleaned:
            return
        self._cleaned = True
        ctx = self._ctx
        for info in self._fs.get_file_info(pafs.FileSelector(self._base)):
            m = _HIDDEN.match(info.base_name)
            if m and m.group(1) != ctx.attempt_id and (int(m.group(2)) == ctx.subtask or (ctx.subtask == 0 and int(m.group(2)) >= ctx.parallelism)):
                self._fs.delete_file(info.path)

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _path(self, name: str) -> str:
        return posixpath.join(self._base, name)


def _to_table(rows: list[Any], schema: pa.Schema | None) -> pa.Table:
    if rows and isinstance(rows[0], dict):
        return pa.Table.from_pylist(rows, schema=schema)
    if rows and isinstance(rows[0], (tuple, list)):
        cols = list(zip(*rows))
        names = schema.names if schema is not None else [f"f{i}" for i in range(len(cols))]
        return pa.Table.from_arrays([pa.array(c) for c in cols], names=names)
    return pa.Table.from_arrays([pa.array(rows)], names=schema.names if schema is not None else ["value"])


def committed_files(path: str) -> list[str]:
    """The visible (committed) part files under ``path``, sorted."""
    fs, base = resolve(path)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except FileNotFoundError:  # being created right now
        return []
    return sorted(i.path for i in infos if i.type == pafs.FileType.File and i.base_name.startswith("part-"))


def read_committed(path: str) -> list[Any]:
    """Every committed record under ``path``: JSON lines parsed, Parquet rows as dicts."""
    fs, _ = resolve(path)
    out: list[Any] = []
    for p in committed_files(path):
        if p.endswith(".parquet"):
            with fs.open_input_file(p) as f:
                out.extend(pq.read_table(f).to_pylist())
        else:
            with fs.open_input_stream(p) as f:
                out.extend(json.loads(line) for line in f.read().decode().splitlines() if line)
    return out
