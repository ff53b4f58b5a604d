"""``stream.map_batches(fn, batch_size=..., batch_format=...)``, Ray Data's name: a
function over a whole batch of rows, for vectorised work and model inference.

Records in are rows (dicts). The operator gathers ``batch_size`` of them, hands
``fn`` the batch in the format asked for (a ``pyarrow.Table``, a
``pandas.DataFrame``, or a dict of numpy arrays), and emits the rows of the
batch ``fn`` returns, which must be of the same format.

Exactly-once like any operator: a batch never spans a checkpoint barrier. The
partial batch is flushed (run through ``fn`` and emitted) in ``snapshot_state``,
which a task calls on its chain head to tail before it sends the barrier on, so
those rows reach the next operator before it snapshots and go downstream before
the barrier; the snapshot holds no rows. The same happens before a watermark
(so no row is late behind one), at the end of input, and when the oldest
buffered row has waited ``batch_timeout_ms``. Batch boundaries therefore depend
on timing: ``fn`` should compute each row's result from that row alone.

pandas and numpy are imported only when a job asks for their format.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

import pyarrow as pa

from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.events import Watermark
from weir.runtime.operators import StreamOperator, now_ms
from weir.runtime.state import OperatorSnapshot


def _arrow_batch(rows: list[dict[str, Any]]) -> Any:
    return pa.Table.from_pylist(rows)


def _arrow_rows(batch: Any) -> list[dict[str, Any]] | None:
    return batch.to_pylist() if isinstance(batch, (pa.Table, pa.RecordBatch)) else None


def _pandas_batch(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    return pd.DataFrame(rows)


def _pandas_rows(batch: Any) -> list[dict[str, Any]] | None:
    import pandas as pd

    return batch.to_dict("records") if isinstance(batch, pd.DataFrame) else None  # type: ignore[no-any-return]


def _numpy_batch(rows: list[dict[str, Any]]) -> Any:
    import numpy as np

    columns = dict.fromkeys(k for r in rows for k in r)
    return {c: np.asarray([r.get(c) for r in rows]) for c in columns}


def _numpy_rows(batch: Any) -> list[dict[str, Any]] | None:
    import numpy as np

    if not isinstance(batch, dict) or not all(isinstance(v, np.ndarray) for v in batch.values()):
        return None
    if len({len(v) for v in batch.values()}) > 1:
        return None
    columns = {name: array.tolist() for name, array in batch.items()}
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


# batch_format -> (rows -> batch, batch -> rows or None when it is not one, what a batch is, module needed)
FORMATS: dict[
    str, tuple[Callable[[list[dict[str, Any]]], Any], Callable[[Any], list[dict[str, Any]] | None], str, str]
] = {
    "pyarrow": (_arrow_batch, _arrow_rows, "a pyarrow.Table", "pyarrow"),
    "pandas": (_pandas_batch, _pandas_rows, "a pandas.DataFrame", "pandas"),
    "numpy": (_numpy_batch, _numpy_rows, "a dict of numpy arrays of one length", "numpy"),
}


def batch_format(name: str) -> str:
    """The format ``name`` asks for (``"default"`` is numpy, as in Ray Data), or a clear error."""
    name = "numpy" if name == "default" else name
    if name not in FORMATS:
        raise InvalidConfigurationError("map_batches batch_format", name, 'use "pyarrow", "pandas" or "numpy"')
    module = FORMATS[name][3]
    if importlib.util.find_spec(module) is None:
        raise InvalidConfigurationError("map_batches batch_format", name, f"needs {module}: pip install {module}")
    return name


class MapBatchesOperator(StreamOperator):
    """Runs ``fn`` over batches of ``batch_size`` rows (see the module's
    docstring for when a partial batch goes). A class as ``fn`` is constructed
    once per subtask in ``open`` (Ray Data's callable class, e.g. to load a
    model once). Output rows keep their input rows' timestamps when ``fn``
    returns as many rows as it got; otherwise each takes the batch's latest."""

    def __init__(
        self,
        name: str,
        uid: str,
        fn: Any,
        batch_size: int,
        format_name: str,
        batch_timeout_ms: int | None,
        constructor_args: tuple[Any, ...] = (),
        constructor_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(name, uid)
        self.fn = fn
        self.batch_size = batch_size
        self.format_name = format_name
        self.batch_timeout_ms = batch_timeout_ms
        self._constructor = (constructor_args, constructor_kwargs or {})
        self._rows: list[Any] = []
        self._timestamps: list[int] | None = None
        self._due_ms: int | None = None  # when the partial batch goes, at the latest

    def open(self) -> None:
        self._to_batch, self._to_rows, self._batch_is, _ = FORMATS[self.format_name]
        self._call = self.fn
        if isinstance(self.fn, type):
            args, kwargs = self._constructor
            try:
                self._call = self.fn(*args, **kwargs)
            except Exception as exc:
                raise self.fail(f"{self.fn.__name__}() (map_batches' callable class)", exc) from exc

    def process_batch(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self._rows.extend(records)
        if timestamps is not None:
            self._timestamps = (self._timestamps or []) + timestamps
        size = self.batch_size
        if len(self._rows) >= size:
            rows, stamps = self._rows, self._timestamps
            full = len(rows) - len(rows) % size
            self._rows = rows[full:]
            self._timestamps = None if stamps is None else stamps[full:]
            for i in range(0, full, size):
                self._run(rows[i : i + size], None if stamps is None else stamps[i : i + size])
        if not self._rows:
            self._due_ms = None
        elif self._due_ms is None and self.batch_timeout_ms is not None:
            self._due_ms = now_ms() + self.batch_timeout_ms

    def _run(self, rows: list[Any], stamps: list[int] | None) -> None:
        for r in rows:
            if type(r) is not dict:
                raise self.fail(
                    "map_batches function",
                    TypeError(
                        f"map_batches takes rows (dicts), got {type(r).__name__}: make them dicts first, "
                        "e.g. .map(lambda v: {'value': v})"
                    ),
                    r,
                    True,
                )
        try:
            produced = self._call(self._to_batch(rows))
        except Exception as exc:
            raise self.fail("map_batches function", exc) from exc
        out = self._to_rows(produced)
        if out is None:
            raise self.fail(
                "map_batches function",
                TypeError(
                    f'returned {type(produced).__name__}, not a batch of batch_format="{self.format_name}" ({self._batch_is})'
                ),
            )
        if stamps is not None and len(out) != len(stamps):
            stamps = [max(stamps)] * len(out)
        if out:
            self.output.collect(out, stamps)

    def _flush(self) -> None:
        rows, stamps = self._rows, self._timestamps
        self._rows, self._timestamps, self._due_ms = [], None, None
        if rows:
            self._run(rows, stamps)

    def process_watermark(self, watermark: Watermark) -> None:
        self._flush()
        super().process_watermark(watermark)

    def next_processing_timer(self) -> int | None:
        return self._due_ms

    def on_processing_time(self, now_ms: int) -> None:
        if self._due_ms is not None and now_ms >= self._due_ms:
            self._flush()

    def snapshot_state(self, checkpoint_id: int) -> OperatorSnapshot:
        self._flush()  # before the barrier: no batch spans it, and the snapshot holds no rows
        return super().snapshot_state(checkpoint_id)

    def finish(self) -> None:
        self._flush()
