"""PyFlink's type information (``pyflink.common.typeinfo``): ``Types.INT()``,
``Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])`` and the
rest, for ``output_type=``, ``type_info=``, ``key_type=`` and state descriptors.

PyFlink serializes a record of a declared type with that type's serializer
between operators, so the next operator gets what the serializer hands back:
a ROW record as a :class:`Row` carrying the type's field names, a TUPLE as a
tuple, an array as a list; a record that does not fit its type fails the job.
weir keeps records as Python objects and does the same on purpose: where a
stream's type is declared, each record is checked and converted to it as it
leaves its operator (:meth:`TypeInformation.convert`). Undeclared streams are
PyFlink's ``PICKLED_BYTE_ARRAY``: any picklable object, unchanged.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import numbers
import struct
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from weir.runtime.errors import InvalidConfigurationError
from weir.runtime.row import Row, RowKind, _make_row


class TypeInformation(ABC):
    """The type of a stream's records (or of a field, a key, a state). Equal
    when they describe the same type; ``repr`` is PyFlink's."""

    def convert(self, value: Any, at_source: bool = False) -> Any:
        """``value`` as a record of this type, as PyFlink's serializer hands it
        to the next operator; ``TypeError`` saying why when it does not fit.
        None fits every type (a missing value). ``at_source``: ``value`` enters
        the stream here (``from_collection(data, type_info)``, a source), where
        PyFlink also makes a ROW of a tuple, list or dict; elsewhere a ROW takes
        only :class:`Row` s, as PyFlink's serializer does."""
        return None if value is None else self._convert(value, at_source)

    @abstractmethod
    def _convert(self, value: Any, at_source: bool) -> Any: ...


class BasicType(enum.Enum):
    """The types with one Python type each; the value is PyFlink's ``repr``."""

    STRING = "String"
    BYTE = "Byte"
    BOOLEAN = "Boolean"
    SHORT = "Short"
    INT = "Integer"
    LONG = "Long"
    FLOAT = "Float"
    DOUBLE = "Double"
    CHAR = "Char"
    BIG_INT = "BigInteger"
    BIG_DEC = "BigDecimal"
    INSTANT = "Instant"
    SQL_DATE = "DateTypeInfo"
    SQL_TIME = "TimeTypeInfo"
    SQL_TIMESTAMP = "TimestampTypeInfo"
    PICKLED_BYTE_ARRAY = "PickledByteArrayTypeInfo"


def _same(value: Any) -> Any:
    return value


def float32(value: Any) -> float:
    """``value`` rounded through 4 bytes, as PyFlink's FLOAT serializer hands it on."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]  # type: ignore[no-any-return]
    except OverflowError:
        raise TypeError(f"{value!r} is out of the range of Float (4 bytes)") from None


def _day(value: datetime.date) -> datetime.date:
    return value.date() if isinstance(value, datetime.datetime) else value  # PyFlink keeps a date's days


class _Python(NamedTuple):
    """What a basic type takes: instances of ``accepts``, handed on as ``convert``
    makes them, of type ``exact`` (as PyFlink's serializers do: a numpy int
    becomes an int, an int a float); fixed-size integers fit ``bits``; a value
    that ``rounds`` goes through ``convert`` even when it is ``exact`` already."""

    exact: type
    accepts: type
    convert: Callable[[Any], Any] = _same
    bits: int = 0
    rounds: bool = False


# None: any object (PyFlink's pickled bytes; PyFlink's Instant class, which weir lacks).
_PYTHON: dict[BasicType, _Python | None] = {
    BasicType.STRING: _Python(str, str, str),
    BasicType.CHAR: _Python(str, str, str),
    BasicType.BOOLEAN: _Python(bool, bool),
    BasicType.BYTE: _Python(int, numbers.Integral, int, 8),
    BasicType.SHORT: _Python(int, numbers.Integral, int, 16),
    BasicType.INT: _Python(int, numbers.Integral, int, 32),
    BasicType.LONG: _Python(int, numbers.Integral, int, 64),
    BasicType.BIG_INT: _Python(int, numbers.Integral, int),
    BasicType.FLOAT: _Python(float, numbers.Real, float32, rounds=True),
    BasicType.DOUBLE: _Python(float, numbers.Real, float),
    BasicType.BIG_DEC: _Python(decimal.Decimal, decimal.Decimal),
    BasicType.SQL_DATE: _Python(datetime.date, datetime.date, _day),
    BasicType.SQL_TIME: _Python(datetime.time, datetime.time),
    BasicType.SQL_TIMESTAMP: _Python(datetime.datetime, datetime.datetime),
    BasicType.INSTANT: None,
    BasicType.PICKLED_BYTE_ARRAY: None,
}


@dataclass(frozen=True, repr=False)
class BasicTypeInfo(TypeInformation):
    """``Types.STRING()``, ``Types.INT()``, ... ``Types.SQL_DATE()``,
    ``Types.PICKLED_BYTE_ARRAY()``: one Python type each (PyFlink's table:
    str, int, float, bool, ``decimal.Decimal``, ``datetime.date`` / ``time`` /
    ``datetime``); fixed-size integers must fit their bits."""

    basic_type: BasicType

    def __post_init__(self) -> None:
        object.__setattr__(self, "_python", _PYTHON[self.basic_type])  # looked up once: this runs per record

    def __reduce__(self) -> tuple[Any, ...]:
        return BasicTypeInfo, (self.basic_type,)

    def _convert(self, value: Any, at_source: bool) -> Any:
        python: _Python | None = self._python  # type: ignore[attr-defined]
        if python is None:
            return value
        if type(value) is not python.exact or python.rounds:
            if not isinstance(value, python.accepts):
                raise TypeError(f"{self!r} takes {python.exact.__name__}, got {type(value).__name__} {value!r}")
            value = python.convert(value)
        bits = python.bits
        if bits and not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise TypeError(f"{value!r} is out of the range of {self!r} ({bits}-bit)")
        return value

    def __repr__(self) -> str:
        return self.basic_type.value


@dataclass(frozen=True, repr=False)
class RowTypeInfo(TypeInformation):
    """``Types.ROW([...])`` (fields named ``f0``, ``f1``, ... as in Flink) and
    ``Types.ROW_NAMED(names, types)``: records are :class:`Row` s with these
    field names, each field of its type. A named row's fields are matched by
    name, a positional row's by position; at a source a tuple or list is taken
    by position, a dict by name."""

    field_types: tuple[TypeInformation, ...]
    field_names: tuple[str, ...]

    def get_field_names(self) -> list[str]:
        return list(self.field_names)

    def get_field_index(self, field_name: str) -> int:
        return self.field_names.index(field_name) if field_name in self.field_names else -1

    def get_field_types(self) -> list[TypeInformation]:
        return list(self.field_types)

    def _convert(self, value: Any, at_source: bool) -> Any:
        names = self.field_names
        kind = RowKind.INSERT
        if isinstance(value, Row):
            kind = value.get_row_kind()
            try:
                values = value._values if value._fields is None else value.get_fields_by_names(list(names))
            except ValueError as exc:  # a named row with other names
                raise TypeError(f"{self!r} takes rows of these fields: {exc}") from None
        elif at_source and isinstance(value, (tuple, list)):
            values = list(value)
        elif at_source and isinstance(value, Mapping):
            values = [value.get(name) for name in names]
        else:
            raise TypeError(
                f"{self!r} takes Row records, got {type(value).__name__} {value!r}: return Row(...) as PyFlink "
                "requires (Types.TUPLE([...]) takes tuples)"
            )
        if len(values) != len(names):
            raise TypeError(f"{self!r} has {len(names)} fields, got {len(values)} values: {value!r}")
        return _make_row(names, _convert_each(self.field_types, values, at_source, names), kind)

    def __repr__(self) -> str:
        return f"RowTypeInfo({', '.join(f'{n}: {t!r}' for n, t in zip(self.field_names, self.field_types))})"


@dataclass(frozen=True, repr=False)
class TupleTypeInfo(TypeInformation):
    """``Types.TUPLE([...])``: records are tuples (a list or a Row is taken by position)."""

    field_types: tuple[TypeInformation, ...]

    def get_field_types(self) -> list[TypeInformation]:
        return list(self.field_types)

    def _convert(self, value: Any, at_source: bool) -> Any:
        if not isinstance(value, (tuple, list, Row)):
            raise TypeError(f"{self!r} takes tuples, got {type(value).__name__} {value!r}")
        if len(value) != len(self.field_types):
            raise TypeError(f"{self!r} has {len(self.field_types)} fields, got {len(value)} values: {value!r}")
        return tuple(_convert_each(self.field_types, value, at_source, range(len(self.field_types))))

    def __repr__(self) -> str:
        return f"TupleTypeInfo({', '.join(repr(t) for t in self.field_types)})"


class ArrayKind(enum.Enum):
    """The four array-like types of PyFlink; each takes a list (or tuple) and gives a list."""

    PRIMITIVE_ARRAY = "PrimitiveArrayTypeInfo"
    BASIC_ARRAY = "BasicArrayTypeInfo"
    OBJECT_ARRAY = "ObjectArrayTypeInfo"
    LIST = "ListTypeInfo"


@dataclass(frozen=True, repr=False)
class ArrayTypeInfo(TypeInformation):
    """``Types.PRIMITIVE_ARRAY(t)``, ``BASIC_ARRAY(t)``, ``OBJECT_ARRAY(t)``,
    ``LIST(t)``: a list of elements of type ``t`` (a tuple becomes a list); a
    primitive array of ``Types.BYTE()`` is ``bytes``, as in PyFlink."""

    kind: ArrayKind
    element_type: TypeInformation

    def _convert(self, value: Any, at_source: bool) -> Any:
        if self.kind is ArrayKind.PRIMITIVE_ARRAY and self.element_type == BasicTypeInfo(BasicType.BYTE):
            if not isinstance(value, (bytes, bytearray)):
                raise TypeError(f"{self!r} takes bytes, got {type(value).__name__} {value!r}")
            return bytes(value)
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{self!r} takes a list, got {type(value).__name__} {value!r}")
        return _convert_each([self.element_type] * len(value), value, at_source, range(len(value)))

    def __repr__(self) -> str:
        return f"{self.kind.value}<{self.element_type!r}>"


@dataclass(frozen=True, repr=False)
class MapTypeInfo(TypeInformation):
    """``Types.MAP(key_type, value_type)``: a dict of keys and values of those types."""

    key_type: TypeInformation
    value_type: TypeInformation

    def _convert(self, value: Any, at_source: bool) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"{self!r} takes a dict, got {type(value).__name__} {value!r}")
        try:
            return {
                self.key_type.convert(k, at_source): self.value_type.convert(v, at_source) for k, v in value.items()
            }
        except TypeError as exc:
            raise TypeError(f"in {self!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"MapTypeInfo<{self.key_type!r}, {self.value_type!r}>"


def _convert_each(
    types: Sequence[TypeInformation],
    values: Iterable[Any],
    at_source: bool,
    where: Iterable[object],
) -> list[Any]:
    """Each value converted to its type; a misfit says which field (a name or an index).
    ``values`` is iterated twice when one does not fit: a sequence (or a Row)."""
    try:  # _convert, not convert: one call less per field
        return [None if v is None else t._convert(v, at_source) for t, v in zip(types, values)]
    except TypeError:
        for field_type, value, at in zip(types, values, where):  # which field: only once it failed
            try:
                field_type.convert(value, at_source)
            except TypeError as exc:
                raise TypeError(f"field {at!r}: {exc}") from None
        raise


class Types:
    """PyFlink's factories of type information, by the same names."""

    @staticmethod
    def STRING() -> TypeInformation:
        return BasicTypeInfo(BasicType.STRING)

    @staticmethod
    def BYTE() -> TypeInformation:
        return BasicTypeInfo(BasicType.BYTE)

    @staticmethod
    def BOOLEAN() -> TypeInformation:
        return BasicTypeInfo(BasicType.BOOLEAN)

    @staticmethod
    def SHORT() -> TypeInformation:
        return BasicTypeInfo(BasicType.SHORT)

    @staticmethod
    def INT() -> TypeInformation:
        return BasicTypeInfo(BasicType.INT)

    @staticmethod
    def LONG() -> TypeInformation:
        return BasicTypeInfo(BasicType.LONG)

    @staticmethod
    def FLOAT() -> TypeInformation:
        return BasicTypeInfo(BasicType.FLOAT)

    @staticmethod
    def DOUBLE() -> TypeInformation:
        return BasicTypeInfo(BasicType.DOUBLE)

    @staticmethod
    def CHAR() -> TypeInformation:
        return BasicTypeInfo(BasicType.CHAR)

    @staticmethod
    def BIG_INT() -> TypeInformation:
        return BasicTypeInfo(BasicType.BIG_INT)

    @staticmethod
    def BIG_DEC() -> TypeInformation:
        return BasicTypeInfo(BasicType.BIG_DEC)

    @staticmethod
    def INSTANT() -> TypeInformation:
        return BasicTypeInfo(BasicType.INSTANT)

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        return BasicTypeInfo(BasicType.SQL_DATE)

    @staticmethod
    def SQL_TIME() -> TypeInformation:
        return BasicTypeInfo(BasicType.SQL_TIME)

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        return BasicTypeInfo(BasicType.SQL_TIMESTAMP)

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return BasicTypeInfo(BasicType.PICKLED_BYTE_ARRAY)

    @staticmethod
    def ROW(field_types: list[TypeInformation]) -> RowTypeInfo:
        return Types.ROW_NAMED([f"f{i}" for i in range(len(field_types))], field_types)

    @staticmethod
    def ROW_NAMED(field_names: list[str], field_types: list[TypeInformation]) -> RowTypeInfo:
        if len(field_names) != len(field_types) or not all(isinstance(n, str) for n in field_names):
            raise ValueError(
                f"Types.ROW_NAMED takes a name (str) per field type, got {field_names!r} for {field_types!r}"
            )
        return RowTypeInfo(_types(field_types, "Types.ROW"), tuple(field_names))

    @staticmethod
    def TUPLE(field_types: list[TypeInformation]) -> TupleTypeInfo:
        return TupleTypeInfo(_types(field_types, "Types.TUPLE"))

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ArrayTypeInfo(ArrayKind.PRIMITIVE_ARRAY, _types([element_type], "Types.PRIMITIVE_ARRAY")[0])

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ArrayTypeInfo(ArrayKind.BASIC_ARRAY, _types([element_type], "Types.BASIC_ARRAY")[0])

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ArrayTypeInfo(ArrayKind.OBJECT_ARRAY, _types([element_type], "Types.OBJECT_ARRAY")[0])

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:
        return ArrayTypeInfo(ArrayKind.LIST, _types([element_type_info], "Types.LIST")[0])

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:
        key, value = _types([key_type_info, value_type_info], "Types.MAP")
        return MapTypeInfo(key, value)


def _types(given: Any, factory: str) -> tuple[TypeInformation, ...]:
    if not isinstance(given, (list, tuple)) or not all(isinstance(t, TypeInformation) for t in given):
        raise TypeError(f"{factory} takes type information (Types.INT(), Types.STRING(), ...), got {given!r}")
    return tuple(given)


def type_arg(value: Any, setting: str, hint: str = "") -> TypeInformation | None:
    """A type argument as given (None: not declared), or an error naming the setting."""
    if value is None or isinstance(value, TypeInformation):
        return value
    raise InvalidConfigurationError(
        setting, value, f"use type information from Types, e.g. Types.INT() or Types.ROW([...]){hint}"
    )


def output_type_arg(value: Any, setting: str) -> TypeInformation | None:
    """An ``output_type``: as :func:`type_arg`, and a list of field types is a ROW, as in PyFlink."""
    return Types.ROW(value) if isinstance(value, list) else type_arg(value, setting)


@dataclass
class RecordTypes:
    """The types declared for an operator's records: its main output's
    (``output_type=``, a source's ``type_info=``; ``at_source`` for a source)
    and, per side output tag id, the type of the :class:`OutputTag` it is read with."""

    main: TypeInformation | None = None
    sides: dict[str, TypeInformation] = field(default_factory=dict)
    at_source: bool = False

    @property
    def declared(self) -> bool:
        return self.main is not None or bool(self.sides)
