"""PyFlink's ``pyflink.common.time``, on weir (no ``Instant``)."""

from weir.runtime.eventtime import Duration, Time

__all__ = ["Duration", "Time"]
