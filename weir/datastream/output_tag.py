"""PyFlink's ``pyflink.datastream.output_tag``, on weir."""

from weir.runtime.functions import OutputTag

__all__ = ["OutputTag"]
