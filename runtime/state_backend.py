"""Where keyed state lives while a job runs: PyFlink's ``HashMapStateBackend``
(on the heap, the default) or ``EmbeddedRocksDBStateBackend`` (in a local
RocksDB per operator subtask), chosen with ``env.set_state_backend(...)``.

A backend here is only settings (picklable, they travel in the job graph to
every task); each keyed operator subtask asks it for its keyed state backend in
``initialize_state``. Both write snapshots that the other restores.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.keygroups import KeyGroupRange
from weir.runtime.rocksdb_backend import RocksDBKeyedStateBackend, RocksDBSettings
from weir.runtime.state import KeyedStateBackend


class StateBackend:
    """What keeps an operator subtask's keyed state (PyFlink's ``StateBackend``)."""

    def create_keyed_backend(
        self,
        max_parallelism: int,
        key_groups: KeyGroupRange,
        folder_name: str,
        uid: str,
        operator: str,
        clock: Callable[[], int] | None = None,
    ) -> KeyedStateBackend:
        """The keyed state backend of one operator subtask (``folder_name``: its
        job, task and attempt, for a backend that keeps files)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashMapStateBackend(StateBackend):
    """State as Python objects on the heap: the fastest reads and writes, as long
    as it fits in memory. Checkpoints write the keys changed since the last one."""

    def create_keyed_backend(
        self,
        max_parallelism: int,
        key_groups: KeyGroupRange,
        folder_name: str,
        uid: str,
        operator: str,
        clock: Callable[[], int] | None = None,
    ) -> KeyedStateBackend:
        return KeyedStateBackend(max_parallelism, key_groups, clock)


def _positive(setting: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidConfigurationError(setting, value, "must be a positive whole number")
    return value


class EmbeddedRocksDBStateBackend(StateBackend):
    """State in an embedded RocksDB per operator subtask, on the local disk
    (``weir.runtime.rocksdb_backend``): state may outgrow memory; each read
    unpickles and each write pickles, behind a write-back cache.

    ``enable_incremental_checkpointing`` (weir's default: on): a checkpoint
    uploads only the SST files the previous one did not name. Memory:
    ``set_write_back_cache_entries`` (entries kept as objects between records,
    default 10,000), ``set_block_cache_size`` (RocksDB's cache of read blocks,
    bytes, default 64 MiB) and ``set_write_buffer_size`` (RocksDB's memtable,
    bytes, default 16 MiB), per operator subtask. ``set_db_storage_path(s)``:
    the local folders the databases go in (default: the temp folder)."""

    def __init__(self, enable_incremental_checkpointing: bool | None = None) -> None:
        if enable_incremental_checkpointing is not None and not isinstance(enable_incremental_checkpointing, bool):
            raise InvalidConfigurationError(
                "enable_incremental_checkpointing", enable_incremental_checkpointing, "must be True, False or None"
            )
        self._incremental = enable_incremental_checkpointing is not False
        self._paths: list[str] = []
        self._cache_entries = 10_000
        self._block_cache_bytes = 64 << 20
        self._write_buffer_bytes = 16 << 20

    def is_incremental_checkpoints_enabled(self) -> bool:
        return self._incremental

    def set_db_storage_path(self, path: str) -> None:
        """The local folder the databases go in."""
        self.set_db_storage_paths(path)

    def set_db_storage_paths(self, *paths: str) -> None:
        """Local folders the databases go in, spread over the operator subtasks."""
        checked = []
        for path in paths:
            local = path.removeprefix("file://") if isinstance(path, str) else None
            if local is None or not os.path.isabs(local):
                raise InvalidConfigurationError(
                    "RocksDB db storage path", path, "must be an absolute local path (or a file:// URI)"
                )
            checked.append(local)
        self._paths = checked

    def get_db_storage_paths(self) -> list[str]:
        return list(self._paths)

    def set_write_back_cache_entries(self, entries: int) -> "EmbeddedRocksDBStateBackend":
        """How many entries a subtask keeps as objects before it writes them to RocksDB (between records)."""
        self._cache_entries = _positive("RocksDB write_back_cache_entries", entries)
        return self

    def get_write_back_cache_entries(self) -> int:
        return self._cache_entries

    def set_block_cache_size(self, size_bytes: int) -> "EmbeddedRocksDBStateBackend":
        """RocksDB's block cache per subtask, bytes (reads of data not in the memtable)."""
        self._block_cache_bytes = _positive("RocksDB block_cache_size", size_bytes)
        return self

    def get_block_cache_size(self) -> int:
        return self._block_cache_bytes

    def set_write_buffer_size(self, size_bytes: int) -> "EmbeddedRocksDBStateBackend":
        """RocksDB's memtable per subtask, bytes: written to an SST file when full (and at each checkpoint)."""
        self._write_buffer_bytes = _positive("RocksDB write_buffer_size", size_bytes)
        return self

    def get_write_buffer_size(self) -> int:
        return self._write_buffer_bytes

    def create_keyed_backend(
        self,
        max_parallelism: int,
        key_groups: KeyGroupRange,
        folder_name: str,
        uid: str,
        operator: str,
        clock: Callable[[], int] | None = None,
    ) -> KeyedStateBackend:
        settings = RocksDBSettings(
            self._cache_entries,
            self._block_cache_bytes,
            self._write_buffer_bytes,
            self._incremental,
            tuple(self._paths),
        )
        return RocksDBKeyedStateBackend(
            max_parallelism, key_groups, settings, f"{folder_name}-{uid}", uid, operator, clock
        )

    def __repr__(self) -> str:
        return f"EmbeddedRocksDBStateBackend(enable_incremental_checkpointing={self._incremental})"
