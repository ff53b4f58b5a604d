"""Files as a source (FLIP-27): PyFlink's ``FileSource``, bounded or watching
folders for new files (issue #15).

Each file is one split. The enumerator runs on the job master: it lists the
source's paths off the job master's loop (``context.call_async``: listing an
object store may block), once for a bounded source and every discovery interval
for a monitored one, and hands each file it has not seen before to the next
reader that asks, one file per request (a bounded source's reader asks again as it
starts the last file it holds). A request that finds nothing waits until
a listing finds a file; a bounded source answers "no more splits" once its one
listing is handed out, a monitored one never does (the source never ends).

A watched folder takes a file only once it is complete. Producers should write
a file under a name that is skipped and rename it when done (atomic on local and
HDFS file systems), as Flink's and Spark's file sources expect. Skipped below a
given folder: names starting with ``.`` or ``_`` (in-progress files, ``_SUCCESS``)
and names ending in a temporary suffix (``.tmp``, ``.temp``, ``.part``,
``.partial``, ``.inprogress``, ``.crdownload``, ``.filepart``, ``._COPYING_``,
``~``). A producer that writes in place is tolerated: a monitored source takes a
file only once its size and modification time have stayed the same for the
settle time (``monitor_continuously(..., settle_time=...)``, 1 s by default),
measured between listings on the job master's monotonic clock (file times from
another machine's clock are only compared for equality), so a half-written line
is never a record; a file must not change once taken. The last line of a taken
file counts even without a newline, as Flink's ``TextLineInputFormat`` reads it.
A bounded source reads the files there are when it starts, as they are.

Exactly-once with checkpointing. The enumerator's checkpointed state is every
file it has found so far and those not handed out yet, so across failures,
restarts, savepoints and rescales each file is read once: a file handed out
before a checkpoint is in its reader's state with its position, a file found
after it is found again. That memory grows with the number of files, as
Flink's does. It holds each file's path, and for a local file (a local disk or
a mount) its identity: inode, size and modification time in ns. A file renamed
within the watched paths keeps its identity and is not read again; if its turn
had not come, it is read once under its new name. The inode alone is reused by
the next file created after a deletion, so size and modification time are part
of the identity; a fingerprint of the first bytes would take a different file
with the same header for the same one and never read it. An object store has no
inodes and renames by copying: there a renamed file is a new file. A path once
taken is not taken again, whatever is written there later.

A reader reads one file at a time on its task's loop thread (blocking reads, in
batches) and checkpoints it with its position: the byte offset of the next line
and how many lines came before it (stream formats), or the row group and the
rows of it read (bulk formats), so a restore resumes mid-file.

A file that is gone when its reader opens it (deleted or moved out before its
turn, or before a restore resumes it) is skipped with a WARNING naming it, and
the job goes on; any other error opening it (no permission) fails the task,
naming the file. Nothing read from a file is unpickled: a malformed line or row
fails the reading task with :class:`MalformedInputError` naming the file and the
line, and the job's restart strategy applies.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

from pyarrow import fs as pafs

from weir.runtime.errors import InvalidConfigurationError, MalformedInputError
from weir.runtime.sources import Poll, Source, SourceReader, SplitEnumerator, SplitEnumeratorContext

log = logging.getLogger("weir.file_source")

DEFAULT_SETTLE_MS = 1000
# A local file's identity: (inode, size, modification time in ns). Without the
# device: a mount's device number differs from one machine to the next.
FileId = tuple[int, int, int]


def resolve(path: str, setting: str = "path") -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system of ``path`` (a local path or any pyarrow.fs URI)
    and the path within it; ``setting`` names the path in the error."""
    uri = path if "://" in path else "file://" + os.path.abspath(path)
    try:
        return pafs.FileSystem.from_uri(uri)
    except Exception as exc:
        raise InvalidConfigurationError(setting, path, f"pyarrow.fs cannot open it ({exc})") from None


@dataclass(frozen=True)
class FileSplit:
    """A file (or a part of one) to read and where reading resumes: ``offset`` is
    the byte offset of the next line (stream formats) or the next row group (bulk
    formats); ``records`` is how many lines came before that offset, or how many
    rows of that row group were read. ``part``: the bytes ``[start, end)`` of a
    file that a splittable format cut (see :attr:`ReaderFormat.split_bytes`);
    the split reads the row groups whose middle byte lies in them."""

    root: str  # the source path it was found under: its file system
    path: str  # the file, within that file system
    offset: int = 0
    records: int = 0
    file_id: FileId | None = None  # a local file's identity when it was found; None on object stores
    part: tuple[int, int] | None = None  # None: the whole file

    @property
    def split_id(self) -> str:
        return self.path if self.part is None else f"{self.path}@{self.part[0]}"


class FileRecords(ABC):
    """One open file of a reader; used by its task's loop thread only."""

    @abstractmethod
    def read(self, max_records: int) -> tuple[list[Any], bool]:
        """Up to ``max_records`` records, and whether the file has no more."""

    @abstractmethod
    def position(self) -> FileSplit:
        """The split, resuming after the last record read."""

    @abstractmethod
    def close(self) -> None: ...


class ReaderFormat(ABC):
    """How a file's bytes become records. Formats travel to the tasks, so they
    hold settings only (picklable). A format with ``split_bytes`` reads a part of
    a file (:attr:`FileSplit.part`): the enumerator cuts each file larger than
    that into parts of that many bytes, so readers share a large file."""

    split_bytes: int | None = None  # None: each file is read whole, by one reader

    @abstractmethod
    def open(self, fs: pafs.FileSystem, split: FileSplit) -> FileRecords: ...


# Stream formats decompress by the file's extension, as PyFlink's do.
_COMPRESSION = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".zst": "zstd"}
_CHUNK_BYTES = 1 << 20


class Lines:
    """The lines of one file from a split's position, each with its terminator
    (the last one may have none). ``offset`` and ``number`` are the position after
    the last line taken: bytes from the file's start, lines taken in all."""

    def __init__(self, fs: pafs.FileSystem, split: FileSplit, charset_name: str) -> None:
        self.split = split
        self.offset = split.offset
        self.number = split.records
        self._charset = charset_name
        self._stream = _open_at(fs, split.path, split.offset)
        self._buffer = b""
        self._start = 0  # of the next line in the buffer
        self._eof = False

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        end = self._buffer.find(b"\n", self._start)
        while end < 0 and not self._eof:
            chunk = self._stream.read(_CHUNK_BYTES)
            self._eof = not chunk
            self._buffer, self._start = self._buffer[self._start :] + chunk, 0
            end = self._buffer.find(b"\n")
        if end < 0:
            if self._start >= len(self._buffer):
                raise StopIteration
            end = len(self._buffer) - 1  # the last line, without a terminator
        raw = self._buffer[self._start : end + 1]
        self._start = end + 1
        self.offset += len(raw)
        self.number += 1
        try:
            return raw.decode(self._charset)
        except UnicodeDecodeError as exc:
            raise self.malformed(f"not {self._charset} ({exc.reason} at byte {exc.start} of the line)") from None

    def malformed(self, problem: str, text: Any = None) -> MalformedInputError:
        """The error for the line taken last (or, for a record over several lines, its last line)."""
        return MalformedInputError(f"file {self.split.path}", f"line {self.number}", problem, text)

    def close(self) -> None:
        self._stream.close()


def _open_at(fs: pafs.FileSystem, path: str, offset: int) -> Any:
    compression = _COMPRESSION.get(posixpath.splitext(path)[1].lower())
    if compression is None:
        f = fs.open_input_file(path)
        f.seek(offset)
        return f
    stream = fs.open_input_stream(path, compression=compression)
    while offset > 0:  # a compressed stream cannot seek: read up to the offset again
        skipped = len(stream.read(min(offset, _CHUNK_BYTES)))
        if not skipped:
            break
        offset -= skipped
    return stream


class StreamFormat(ReaderFormat):
    """Records from the lines of a file (PyFlink's ``StreamFormat``; weir's stream
    formats are line based), decoded with ``charset_name``. Files ending in
    ``.gz``/``.gzip``, ``.bz2`` or ``.zst`` are decompressed. A restore seeks to the
    checkpointed byte offset (a compressed file is read up to it again)."""

    def __init__(self, charset_name: str = "UTF-8") -> None:
        try:
            newline = "\n".encode(charset_name)
        except LookupError:
            raise InvalidConfigurationError("charset_name", charset_name, "Python knows no such codec") from None
        if newline != b"\n":
            raise InvalidConfigurationError(
                "charset_name",
                charset_name,
                "lines are split at the byte \\n: use a charset that encodes it so (UTF-8, ISO-8859-1, ...)",
            )
        self.charset_name = charset_name

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> StreamFormat:
        """Each line is a ``str`` record, without its ``\\n`` or ``\\r\\n``."""
        return _TextLines(charset_name)

    @staticmethod
    def json_lines_format(charset_name: str = "UTF-8") -> StreamFormat:
        """Each line is one JSON value (weir's; PyFlink has no such stream format).
        Blank lines are skipped."""
        return _JsonLines(charset_name)

    @abstractmethod
    def records(self, lines: Lines) -> Iterator[Any]:
        """The records of ``lines``, lazily: when a record is yielded, ``lines`` is
        just past it, which is where a restore resumes. A bad line raises
        ``lines.malformed(...)``."""

    def open(self, fs: pafs.FileSystem, split: FileSplit) -> FileRecords:
        return _StreamRecords(self, Lines(fs, split, self.charset_name))


class _StreamRecords(FileRecords):
    def __init__(self, fmt: StreamFormat, lines: Lines) -> None:
        self._lines = lines
        self._records = fmt.records(lines)

    def read(self, max_records: int) -> tuple[list[Any], bool]:
        out: list[Any] = []
        for record in self._records:
            out.append(record)
            if len(out) >= max_records:
                return out, False
        return out, True

    def position(self) -> FileSplit:
        return replace(self._lines.split, offset=self._lines.offset, records=self._lines.number)

    def close(self) -> None:
        self._lines.close()


def _strip_terminator(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


class _TextLines(StreamFormat):
    def records(self, lines: Lines) -> Iterator[Any]:
        return map(_strip_terminator, lines)


class _JsonLines(StreamFormat):
    def records(self, lines: Lines) -> Iterator[Any]:
        for line in lines:
            text = line.strip()
            if text:
                try:
                    yield json.loads(text)
                except ValueError as exc:
                    raise lines.malformed(f"not JSON ({exc})", text) from None


class BulkFormat(ReaderFormat):
    """Reads a file a batch at a time (PyFlink's ``BulkFormat``): Parquet, with
    :class:`weir.connectors.formats.ParquetColumnarRowInputFormat`."""


# ---------------------------------------------------------------------- the source
class FileSourceBuilder:
    """PyFlink's ``FileSourceBuilder``: bounded unless :meth:`monitor_continuously`."""

    def __init__(self, fmt: ReaderFormat, paths: Sequence[str]) -> None:
        self._format = fmt
        self._paths = tuple(paths)
        self._discovery_interval_ms: int | None = None
        self._settle_ms = DEFAULT_SETTLE_MS

    def monitor_continuously(self, discovery_interval: int, settle_time: int = DEFAULT_SETTLE_MS) -> FileSourceBuilder:
        """Watch the paths for new files every ``discovery_interval`` milliseconds
        (``Duration.of_seconds(10)``): the source never ends (stop or cancel the job).
        A new file is taken once its size and modification time have not changed
        for ``settle_time`` milliseconds (weir's; 0 takes it at once: for
        producers that rename complete files in)."""
        if isinstance(discovery_interval, bool) or not isinstance(discovery_interval, int) or discovery_interval <= 0:
            raise InvalidConfigurationError(
                "FileSource discovery_interval",
                discovery_interval,
                "must be a positive int of milliseconds, e.g. Duration.of_seconds(10)",
            )
        if isinstance(settle_time, bool) or not isinstance(settle_time, int) or settle_time < 0:
            raise InvalidConfigurationError(
                "FileSource settle_time",
                settle_time,
                "must be an int of milliseconds, 0 or more, e.g. Duration.of_seconds(1)",
            )
        self._discovery_interval_ms = discovery_interval
        self._settle_ms = settle_time
        return self

    def process_static_file_set(self) -> FileSourceBuilder:
        """Read the files there are at the start, then end (the default)."""
        self._discovery_interval_ms = None
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._discovery_interval_ms, self._settle_ms)


class FileSource(Source[Any]):
    """Files and folders (local or any pyarrow.fs URI), each file read once, also
    across failures, restarts, savepoints and rescales (see the module's doc).
    Build one with :meth:`for_record_stream_format` or :meth:`for_bulk_file_format`."""

    def __init__(
        self,
        fmt: ReaderFormat,
        paths: Sequence[str],
        discovery_interval_ms: int | None = None,
        settle_ms: int = DEFAULT_SETTLE_MS,
    ) -> None:
        if not paths:
            raise InvalidConfigurationError("FileSource paths", tuple(paths), "give at least one file or folder")
        for path in paths:
            resolve(path, "FileSource path")
        self.format = fmt
        self.paths = tuple(paths)
        self.discovery_interval_ms = discovery_interval_ms
        self.settle_ms = settle_ms
        self.bounded = discovery_interval_ms is None

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> FileSourceBuilder:
        if not isinstance(stream_format, StreamFormat):
            raise TypeError(
                "for_record_stream_format() takes a StreamFormat (e.g. StreamFormat.text_line_format()), "
                f"got {type(stream_format).__name__}"
            )
        return FileSourceBuilder(stream_format, paths)

    @staticmethod
    def for_bulk_file_format(bulk_format: BulkFormat, *paths: str) -> FileSourceBuilder:
        if not isinstance(bulk_format, BulkFormat):
            raise TypeError(
                "for_bulk_file_format() takes a BulkFormat (e.g. ParquetColumnarRowInputFormat()), "
                f"got {type(bulk_format).__name__}"
            )
        return FileSourceBuilder(bulk_format, paths)

    def create_enumerator(self, parallelism: int, restored: Any | None) -> SplitEnumerator:
        return FileEnumerator(
            self.paths,
            self.discovery_interval_ms,
            restored or FileEnumeratorState(),
            settle_ms=self.settle_ms,
            split_bytes=self.format.split_bytes,
        )

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        return FileReader(self.format, ask_ahead=self.bounded)


@dataclass(frozen=True)
class FileEnumeratorState:
    """Plain data: paths, splits and tuples of ints. A checkpoint taken before
    ``seen_files`` existed restores with it empty (its class default)."""

    seen: frozenset[str] = frozenset()  # the path of every file taken so far: never taken again
    pending: tuple[FileSplit, ...] = ()  # taken, not handed out yet
    listed: bool = False  # a bounded source's one listing is done
    seen_files: frozenset[FileId] = frozenset()  # the identity of every local file taken: renamed, not new


@dataclass(frozen=True)
class ListedFile:
    """A file a listing found, and its version: (size, modification time in ns,
    None where the file system keeps none)."""

    split: FileSplit
    version: tuple[int, int | None]


@dataclass(frozen=True)
class Listing:
    """What one listing found, and when it ran on the enumerator's clock (seconds)."""

    files: list[ListedFile]
    started_s: float
    ended_s: float


@dataclass(frozen=True)
class _Sighting:
    version: tuple[int, int | None]
    since_s: float  # the end of the first listing that saw this version


class FileEnumerator(SplitEnumerator):
    """Hands out each file once, one per request. Runs on the job master's loop
    thread; its listings run off it and touch nothing of this object.

    A monitored enumerator takes a new file once the same version of it was seen
    by two listings ``settle_ms`` apart: from the end of the first to the start of
    the second, so time spent listing does not count (``clock``, in seconds, is
    read by the listings: it must be safe to call from any thread). Files not
    settled yet are not checkpointed: after a restore their settle time starts
    again."""

    def __init__(
        self,
        paths: tuple[str, ...],
        discovery_interval_ms: int | None,
        state: FileEnumeratorState,
        settle_ms: int = DEFAULT_SETTLE_MS,
        clock: Callable[[], float] = time.monotonic,
        split_bytes: int | None = None,
    ) -> None:
        self._paths = paths
        self._split_bytes = split_bytes
        self._discovery_interval_ms = discovery_interval_ms
        # A bounded source reads the files there are, as they are.
        self._settle_s = settle_ms / 1000 if discovery_interval_ms is not None else 0.0
        self._clock = clock
        self._seen = set(state.seen)
        self._seen_files = set(state.seen_files)
        self._pending = list(state.pending)
        self._listed = state.listed
        self._unsettled: dict[str, _Sighting] = {}  # by path: found, not settled yet
        self._waiting: set[int] = set()  # asked when there was nothing: answered when a listing finds files
        self._context: SplitEnumeratorContext

    def start(self, context: SplitEnumeratorContext) -> None:
        self._context = context
        paths, clock = self._paths, self._clock

        def listing() -> Listing:
            return list_at(paths, clock)

        if self._discovery_interval_ms is not None:
            context.call_async(listing, self._found, period_s=self._discovery_interval_ms / 1000)
        elif not self._listed:
            context.call_async(listing, self._found)

    def _found(self, listing: Listing | None, error: BaseException | None) -> None:
        if error is not None:
            raise error
        assert listing is not None
        fresh = []
        for f in listing.files:
            if f.split.path in self._seen:
                continue
            if f.split.file_id is not None and f.split.file_id in self._seen_files:
                self._renamed(f.split)
            else:
                fresh.append(f)
        for f in self._settled(fresh, listing):
            self._seen.add(f.split.path)
            if f.split.file_id is not None:
                self._seen_files.add(f.split.file_id)
            self._pending.extend(_parts(f.split, f.version[0], self._split_bytes))
        self._listed = True
        waiting, self._waiting = sorted(self._waiting), set()
        for subtask in waiting:
            self.handle_split_request(subtask, self._context)

    def _renamed(self, split: FileSplit) -> None:
        """``split`` is a file taken before under another path: if its turn has not
        come, it is read under its new path (the old one is gone)."""
        self._seen.add(split.path)
        self._pending = [
            replace(p, root=split.root, path=split.path) if p.file_id == split.file_id else p for p in self._pending
        ]

    def _settled(self, files: list[ListedFile], listing: Listing) -> list[ListedFile]:
        """Those of ``files`` whose version has held for the settle time; the
        others are remembered until the next listing (only while listed: a file
        that vanished is forgotten)."""
        if self._settle_s <= 0:
            return files
        taken, unsettled = [], {}
        for f in files:
            sighting = self._unsettled.get(f.split.path)
            if sighting is None or sighting.version != f.version:
                unsettled[f.split.path] = _Sighting(f.version, listing.ended_s)
            elif listing.started_s - sighting.since_s >= self._settle_s:
                taken.append(f)
            else:
                unsettled[f.split.path] = sighting
        self._unsettled = unsettled
        return taken

    def handle_split_request(self, subtask: int, context: SplitEnumeratorContext) -> None:
        if self._pending:
            context.assign_splits(subtask, [self._pending.pop(0)])
        elif self._listed and self._discovery_interval_ms is None:
            context.signal_no_more_splits(subtask)
        else:
            self._waiting.add(subtask)

    def snapshot_state(self) -> Any:
        return FileEnumeratorState(
            frozenset(self._seen), tuple(self._pending), self._listed, frozenset(self._seen_files)
        )

    def add_splits_back(self, splits: list[Any], subtask: int) -> None:
        self._pending[:0] = splits


def _parts(split: FileSplit, size: int, split_bytes: int | None) -> list[FileSplit]:
    """A file of ``size`` bytes as the splits to hand out: whole, or in parts of
    ``split_bytes`` (Flink's block splitting, with the block size the format's)."""
    if not split_bytes or size <= split_bytes:
        return [split]
    return [replace(split, part=(start, min(start + split_bytes, size))) for start in range(0, size, split_bytes)]


def list_at(paths: Sequence[str], clock: Callable[[], float]) -> Listing:
    """:func:`list_files`, with the times it started and ended on ``clock``."""
    started_s = clock()
    files = list_files(paths)
    return Listing(files, started_s, clock())


def list_files(paths: Sequence[str]) -> list[ListedFile]:
    """Every file given, or below a given folder and not in progress by its name,
    sorted by path. Blocks (an object store's listing): never call it on the job
    master's loop."""
    found: dict[str, ListedFile] = {}
    for root in paths:
        fs, base = resolve(root, "FileSource path")
        info = fs.get_file_info(base)
        if info.type == pafs.FileType.File:
            infos = [info]
        elif info.type == pafs.FileType.Directory:
            infos = [
                f
                for f in fs.get_file_info(pafs.FileSelector(base, recursive=True))
                if f.type == pafs.FileType.File and not _in_progress(posixpath.relpath(f.path, base))
            ]
        else:
            raise FileNotFoundError(f"FileSource path {root} does not exist")
        for f in infos:
            if f.path not in found and (listed := _listed(root, f, fs.type_name == "local")) is not None:
                found[f.path] = listed
    return [found[p] for p in sorted(found)]


def _listed(root: str, info: pafs.FileInfo, local: bool) -> ListedFile | None:
    """The file with its version and, on a local file system, its identity; None
    when it vanished since the listing saw it."""
    if not local:
        return ListedFile(FileSplit(root, info.path), (info.size, info.mtime_ns))
    try:
        st = os.stat(info.path)
    except FileNotFoundError:
        return None
    return ListedFile(
        FileSplit(root, info.path, file_id=(st.st_ino, st.st_size, st.st_mtime_ns)), (st.st_size, st.st_mtime_ns)
    )


# What producers and copy tools name files they are still writing.
_IN_PROGRESS_SUFFIXES = (
    ".tmp",
    ".temp",
    ".part",
    ".partial",
    ".inprogress",
    ".crdownload",
    ".filepart",
    "._copying_",
    "~",
)


def _in_progress(relative: str) -> bool:
    parts = relative.split("/")
    hidden = any(part.startswith((".", "_")) for part in parts)
    return hidden or parts[-1].lower().endswith(_IN_PROGRESS_SUFFIXES)


class FileReader(SourceReader):
    """Reads its files one at a time, in the order they came, on its task's loop thread.
    ``ask_ahead``: asks for the next file as it starts its last (a bounded source;
    a watched folder's new file goes to a reader with none, not to one still busy)."""

    def __init__(self, fmt: ReaderFormat, ask_ahead: bool = False) -> None:
        self._format = fmt
        self._ask_ahead = ask_ahead
        self._splits: list[FileSplit] = []
        self._open: FileRecords | None = None  # reading self._splits[0]
        self._filesystems: dict[str, pafs.FileSystem] = {}

    def add_splits(self, splits: list[Any]) -> None:
        self._splits.extend(splits)

    def poll(self, max_records: int) -> Poll:
        while self._splits:
            split = self._splits[0]
            if self._open is None:
                try:
                    self._open = self._format.open(self._filesystem(split.root), split)
                except FileNotFoundError:  # only that: any other reason (no permission) fails the task
                    begun = split.offset > 0 or split.records > 0  # a restore resumes it mid-file
                    log.warning(
                        "FileSource: file %s is gone (deleted or moved out) before it was read%s",
                        split.path,
                        " to its end: skipping the rest of it" if begun else ": skipping it",
                    )
                    self._splits.pop(0)
                    continue
            records, done = self._open.read(max_records)
            if done:
                self.close()
                self._splits.pop(0)
            if records:
                return Poll(records, split_id=split.split_id)
        return Poll([], end=True)

    def running_low(self) -> bool:
        return self._ask_ahead and len(self._splits) == 1

    def snapshot_splits(self) -> list[Any]:
        if self._open is None:
            return list(self._splits)
        return [self._open.position()] + self._splits[1:]

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None

    def _filesystem(self, root: str) -> pafs.FileSystem:
        if root not in self._filesystems:
            self._filesystems[root] = resolve(root, "FileSource path")[0]
        return self._filesystems[root]
