"""PyFlink's ``pyflink.common.types``, on weir."""

from weir.runtime.row import Row, RowKind

__all__ = ["Row", "RowKind"]
