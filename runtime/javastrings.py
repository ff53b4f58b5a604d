"""Records as PyFlink shows them: a record of a declared type crosses to Java,
and Java's ``toString()`` prints it (``print()``): a ROW as ``+I[a, 1]``, a TUPLE
as ``(a,1)``, a FLOAT ``163.3``, a BOOLEAN ``true``, None ``null``, a timestamp
``2021-01-09 12:00:00.011``. A record of
no declared type is pickled bytes in PyFlink, which prints it as ``str()``."""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any

from weir.runtime.row import Row
from weir.runtime.typeinfo import (
    ArrayTypeInfo,
    BasicType,
    BasicTypeInfo,
    MapTypeInfo,
    RowTypeInfo,
    TupleTypeInfo,
    TypeInformation,
    float32,
)

_FLOAT = BasicTypeInfo(BasicType.FLOAT)
_PICKLED = BasicTypeInfo(BasicType.PICKLED_BYTE_ARRAY)


def printed(record: Any, type_info: TypeInformation | None) -> str:
    """What PyFlink's ``print()`` shows for ``record`` of a stream of ``type_info``."""
    return str(record) if type_info is None or type_info == _PICKLED else java_string(record, type_info)


def java_string(value: Any, type_info: TypeInformation | None = None) -> str:
    """``value`` as Java's ``toString()`` of the object PyFlink makes of it for
    ``type_info``; with no type, as the Java object of its Python type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_float(value) if type_info == _FLOAT else _java_number(repr(value))
    if isinstance(value, datetime.datetime):  # java.sql.Timestamp: the fraction without trailing zeros, at least ".0"
        return f"{value:%Y-%m-%d %H:%M:%S}.{f'{value.microsecond:06d}'.rstrip('0') or '0'}"
    if isinstance(value, datetime.time):  # java.sql.Time: whole seconds
        return f"{value:%H:%M:%S}"
    if isinstance(value, Row):
        types = type_info.field_types if isinstance(type_info, RowTypeInfo) else (None,) * len(value)
        return f"{value.get_row_kind()}[{', '.join(java_string(v, t) for v, t in zip(value, types))}]"
    if isinstance(value, tuple):
        types = type_info.field_types if isinstance(type_info, TupleTypeInfo) else (None,) * len(value)
        return f"({','.join(java_string(v, t) for v, t in zip(value, types))})"
    if isinstance(value, list):
        element = type_info.element_type if isinstance(type_info, ArrayTypeInfo) else None
        return f"[{', '.join(java_string(v, element) for v in value)}]"
    if isinstance(value, dict):
        k, v = (type_info.key_type, type_info.value_type) if isinstance(type_info, MapTypeInfo) else (None, None)
        return "{" + ", ".join(f"{java_string(a, k)}={java_string(b, v)}" for a, b in value.items()) + "}"
    return str(value)


def _java_float(value: float) -> str:
    """A 4-byte float as Java's ``Float.toString``: the fewest digits that read back as it."""
    if not math.isfinite(value):
        return _java_number(repr(value))
    digits = next(f"{value:.{p}g}" for p in range(1, 10) if float32(float(f"{value:.{p}g}")) == value)
    return _java_number(digits)


def _java_number(shortest: str) -> str:
    """Python's shortest digits of a float in Java's notation: ``1.0``, ``0.001``,
    ``1.0E7``, ``1.5E-4``, ``NaN``, ``Infinity``."""
    number = decimal.Decimal(shortest)
    if number.is_nan():
        return "NaN"
    if number.is_infinite():
        return "-Infinity" if number < 0 else "Infinity"
    if number == 0:
        return "-0.0" if number.is_signed() else "0.0"
    sign, digits, exponent = number.normalize().as_tuple()
    text = "".join(map(str, digits))
    magnitude = len(digits) - 1 + int(exponent)
    minus = "-" if sign else ""
    if -3 <= magnitude < 7:
        if magnitude < 0:
            return f"{minus}0.{'0' * (-magnitude - 1)}{text}"
        whole, fraction = text[: magnitude + 1].ljust(magnitude + 1, "0"), text[magnitude + 1 :]
        return f"{minus}{whole}.{fraction or '0'}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{magnitude}"
