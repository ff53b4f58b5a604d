"""What travels on a channel besides record batches, in channel order."""

from __future__ import annotations

import enum
from dataclasses import dataclass

MAX_WATERMARK = 2**63 - 1
MIN_WATERMARK = -(2**63)


@dataclass(frozen=True, slots=True)
class Watermark:
    timestamp: int


class CheckpointKind(enum.Enum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


@dataclass(frozen=True, slots=True)
class WatermarkStatus:
    """An input went idle (no watermark to wait for) or became active again."""

    idle: bool


@dataclass(frozen=True, slots=True)
class CheckpointBarrier:
    checkpoint_id: int
    timestamp_ms: int
    kind: CheckpointKind = CheckpointKind.CHECKPOINT
    location: str = ""  # URI of the folder every task writes its state into
    base: int | None = None  # the latest completed checkpoint: a task that wrote it may write only changes since


@dataclass(frozen=True, slots=True)
class CancelCheckpointMarker:
    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class EndOfData:
    """No more records on this channel. ``drain``: the producer flushed and fired
    everything (bounded end or stop-with-drain); without drain it was suspended."""

    drain: bool = True


@dataclass(frozen=True, slots=True)
class EndOfPartition:
    """The producer exited; the channel counts as aligned for every checkpoint."""
