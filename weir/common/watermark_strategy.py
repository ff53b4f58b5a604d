"""PyFlink's ``pyflink.common.watermark_strategy``, on weir."""

from weir.runtime.eventtime import TimestampAssigner, WatermarkStrategy

__all__ = ["WatermarkStrategy", "TimestampAssigner"]
