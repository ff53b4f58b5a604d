"""A task's input watermark (Flink's StatusWatermarkValve): the minimum over its
input channels, leaving out idle ones and ones that ended drained (they sent
``MAX_WATERMARK`` before ``EndOfData``). A channel that *stopped* (``EndOfData``
without drain, a suspend) keeps holding the minimum at its last watermark:
what it would have sent is still to come, after the resume. When every channel
still counted is idle, the task is idle itself.

Each method returns what the task's head operator must see, in order: a
``WatermarkStatus`` when the task's idleness flips, a ``Watermark`` when its
watermark advances.
"""

from __future__ import annotations

from weir.runtime.events import MAX_WATERMARK, MIN_WATERMARK, Watermark, WatermarkStatus


class WatermarkValve:
    def __init__(self, channels: int) -> None:
        self._watermarks = [MIN_WATERMARK] * channels
        self._idle: set[int] = set()
        self._drained: set[int] = set()
        self.watermark = MIN_WATERMARK
        self.idle = False

    def on_watermark(self, channel: int, timestamp: int) -> list[Watermark | WatermarkStatus]:
        self._watermarks[channel] = timestamp
        self._idle.discard(channel)  # a watermark makes a channel active again
        return self._advance()

    def on_status(self, channel: int, idle: bool) -> list[Watermark | WatermarkStatus]:
        if idle:
            self._idle.add(channel)
        else:
            self._idle.discard(channel)
        return self._advance()

    def on_end_of_data(self, channel: int, drain: bool) -> list[Watermark | WatermarkStatus]:
        if drain:
            self._drained.add(channel)
        return self._advance()

    def _advance(self) -> list[Watermark | WatermarkStatus]:
        out: list[Watermark | WatermarkStatus] = []
        counted = [ch for ch in range(len(self._watermarks)) if ch not in self._drained]
        live = [self._watermarks[ch] for ch in counted if ch not in self._idle]
        idle = bool(counted) and not live
        if idle != self.idle:
            self.idle = idle
            out.append(WatermarkStatus(idle))
        if idle:
            return out
        new = min(live) if live else max(self._watermarks, default=MAX_WATERMARK)
        if new > self.watermark:
            self.watermark = new
            out.append(Watermark(new))
        return out
