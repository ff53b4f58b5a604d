"""PyFlink's ``Row`` and ``RowKind`` (``pyflink.common.types``), with the same
semantics as PyFlink 2.x: a record whose fields are read by position
(``row[0]``), by name (``row["name"]``) and as attributes (``row.name``).

    Row(1, "a")                      # positional: <Row(1, 'a')>
    Row(name="Alice", age=11)        # named, in the order given: Row(name='Alice', age=11)
    Person = Row("name", "age")      # a factory ...
    Person("Alice", 11)              # ... of named rows: Row(name='Alice', age=11)

Rows pickle with their names and kind, so they cross tasks like tuples.
"""

from __future__ import annotations

import enum
from typing import Any, Iterable, Iterator


class RowKind(enum.Enum):
    """What a row means in a changelog, as Flink's ``RowKind``; ``str()`` is
    the short form Flink prints (``+I``, ``-U``, ``+U``, ``-D``)."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def __str__(self) -> str:
        return ("+I", "-U", "+U", "-D")[self.value]


class Row:
    """A row of fields, positional or named (see the module's docstring).

    As in PyFlink: keyword arguments keep their order; a positional row used
    as a function is a factory of named rows; ``key in row`` looks among the
    names of a named row and among the values of a positional one; fields can
    be set by index or name (``row[0] = x``) but not as attributes; two named
    rows are equal when they have the same names with equal values, in any
    order, and the same kind. Unlike PyFlink, equal named rows also hash alike."""

    __slots__ = ("_fields", "_values", "_row_kind")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise ValueError("Row takes its values by position or by name, not both")
        self._fields: list[str] | None = list(kwargs) if kwargs else None
        self._values: list[Any] = list(kwargs.values()) if kwargs else list(args)
        self._row_kind = RowKind.INSERT

    @staticmethod
    def of_kind(row_kind: RowKind, *args: Any, **kwargs: Any) -> "Row":
        row = Row(*args, **kwargs)
        row.set_row_kind(row_kind)
        return row

    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        """The fields by name; ``recursive`` turns nested rows (also in lists
        and dicts) into dicts too. A positional row has no names: TypeError."""
        if self._fields is None:
            raise TypeError(f"as_dict() needs a row with field names, got the positional row {self!r}")
        if not recursive:
            return dict(zip(self._fields, self._values))

        def plain(value: Any) -> Any:
            if isinstance(value, Row):
                return value.as_dict(True)
            if isinstance(value, list):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return value

        return {name: plain(value) for name, value in zip(self._fields, self._values)}

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        self._row_kind = row_kind

    def set_field_names(self, field_names: list[str]) -> None:
        self._fields = list(field_names)

    def get_fields_by_names(self, names: list[str]) -> list[Any]:
        """The values of fields ``names``, in that order (a positional row: its values)."""
        if self._fields is None or names == self._fields:
            return self._values
        return [self._values[self._index(name)] for name in names]

    def _index(self, name: str) -> int:
        if self._fields is None or name not in self._fields:
            raise ValueError(f"{name!r} is not a field of {self!r}")
        return self._fields.index(name)

    def __call__(self, *args: Any) -> "Row":
        """A positional row of names makes named rows: ``Row("name", "age")("Alice", 11)``."""
        if len(args) > len(self._values):
            raise ValueError(f"{self!r} makes rows of {len(self._values)} fields, got {len(args)} values: {args!r}")
        return _make_row([str(name) for name in self._values], args, self._row_kind)

    def __getitem__(self, item: int | slice | str) -> Any:
        if isinstance(item, (int, slice)):
            return self._values[item]
        return self._values[self._index(item)]

    def __setitem__(self, key: int | slice | str, value: Any) -> None:
        if isinstance(key, (int, slice)):
            self._values[key] = value
        else:
            self._values[self._index(key)] = value

    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not slots or methods: field names.
        if not name.startswith("_") and self._fields is not None and name in self._fields:
            return self._values[self._fields.index(name)]
        raise AttributeError(name)

    def __contains__(self, item: object) -> bool:
        return item in (self._values if self._fields is None else self._fields)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row):
            return NotImplemented
        if type(self) is not type(other) or self._row_kind is not other._row_kind:
            return False
        if self._fields is None or other._fields is None:
            return self._fields is None and other._fields is None and self._values == other._values
        return self._by_name() == other._by_name()

    def _by_name(self) -> list[tuple[str, Any]]:
        assert self._fields is not None
        return sorted(zip(self._fields, self._values), key=lambda field: field[0])

    def __hash__(self) -> int:
        if self._fields is None:
            return hash(tuple(self._values))
        return hash(tuple(self._by_name()))

    def __reduce__(self) -> tuple[Any, ...]:
        return _make_row, (self._fields, tuple(self._values), self._row_kind)

    def __repr__(self) -> str:
        if self._fields is None:
            return f"<Row({', '.join(repr(v) for v in self._values)})>"
        return f"Row({', '.join(f'{k}={v!r}' for k, v in zip(self._fields, self._values))})"


def _make_row(fields: Iterable[str] | None, values: Iterable[Any], row_kind: RowKind) -> Row:
    row = Row.__new__(Row)  # not Row(*values): types make a row per record
    row._fields = None if fields is None else list(fields)
    row._values = list(values)
    row._row_kind = row_kind
    return row
