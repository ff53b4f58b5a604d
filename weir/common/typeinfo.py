"""PyFlink's ``pyflink.common.typeinfo``, on weir."""

from weir.runtime.typeinfo import TypeInformation, Types

__all__ = ["TypeInformation", "Types"]
