"""Pickling for weir's own bytes: channel batches and state snapshots. Plain pickle
for speed; cloudpickle for what plain pickle refuses (lambdas, local classes)."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle


def dumps(obj: Any) -> bytes:
    """Raises cloudpickle's error when neither can pickle ``obj``."""
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception:
        return cloudpickle.dumps(obj, protocol=5)


def loads(data: bytes) -> Any:
    """Only for bytes weir wrote itself (deliveries, checkpoint files), never for input data."""
    return pickle.loads(data)
