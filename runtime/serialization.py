"""Pickling for weir's own bytes: channel batches and state snapshots. Plain pickle
for speed; cloudpickle for what plain pickle refuses (lambdas, local classes)."""

from __future__ import annotations

import io
import pickle
from typing import Any, Iterator

import cloudpickle


def dumps(obj: Any) -> bytes:
    """Raises cloudpickle's error when neither can pickle ``obj``."""
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception:
        return cloudpickle.dumps(obj, protocol=5)


def dumps_each(objs: list[Any]) -> list[bytes]:
    """:func:`dumps` of each object, in one loop (for many small objects the
    call around each pickling costs a third of it)."""
    try:
        return [pickle.dumps(obj, 5) for obj in objs]
    except Exception:
        return [dumps(obj) for obj in objs]


def dumps_state(obj: Any) -> bytes:
    """Like :func:`dumps`, for a snapshot of state: without pickle's memo first,
    six times faster on millions of small tuples. State holds no cycles as a rule
    (Flink serializes each value alone, so values never share an object across a
    restore); one that has them is pickled with the memo."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.fast = True  # no memo: each object written where it occurs
    try:
        pickler.dump(obj)
    except (ValueError, RecursionError, pickle.PicklingError, TypeError, AttributeError):
        return dumps(obj)
    return out.getvalue()


def loads(data: bytes) -> Any:
    """Only for bytes weir wrote itself (deliveries, checkpoint files), never for input data."""
    return pickle.loads(data)


def loads_each(data: bytes) -> Iterator[Any]:
    """The objects of :func:`dumps_state` pickles written one after another (weir's
    own bytes only, as :func:`loads`)."""
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        yield pickle.load(stream)
