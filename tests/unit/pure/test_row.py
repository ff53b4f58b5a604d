"""Row and RowKind behave as PyFlink 2.x's (pyflink/common/types.py): the
doctests of its docstring, and what crossing processes needs."""

from __future__ import annotations

import copy
import pickle

import pytest

from weir import Row, RowKind


def test_named_row_keeps_keyword_order_and_reads_fields_every_way():
    row = Row(name="Alice", age=11)
    assert repr(row) == "Row(name='Alice', age=11)"
    assert (row["name"], row["age"]) == ("Alice", 11)
    assert (row.name, row.age) == ("Alice", 11)
    assert (row[0], row[1], row[-1], row[:1]) == ("Alice", 11, 11, ["Alice"])
    assert list(row) == ["Alice", 11] and len(row) == 2
    assert "name" in row and "wrong_key" not in row and "Alice" not in row  # a named row: `in` looks at names
    assert row.as_dict() == {"name": "Alice", "age": 11}


def test_positional_row_is_tuple_like_and_a_factory_of_named_rows():
    row = Row(1, "a")
    assert repr(row) == "<Row(1, 'a')>"
    assert row[1] == "a" and tuple(row) == (1, "a") and 1 in row
    name, letter = row
    assert (name, letter) == (1, "a")

    Person = Row("name", "age")
    assert repr(Person) == "<Row('name', 'age')>" and "name" in Person
    alice = Person("Alice", 11)
    assert alice == Row(name="Alice", age=11) and alice.age == 11
    with pytest.raises(ValueError, match="2 fields, got 3"):
        Person("Alice", 11, "extra")


def test_missing_fields_raise_as_in_pyflink():
    row = Row(name="Alice")
    with pytest.raises(AttributeError):
        _ = row.age
    with pytest.raises(ValueError, match="'age' is not a field"):
        row["age"]
    with pytest.raises(TypeError, match="needs a row with field names"):
        Row(1, 2).as_dict()
    with pytest.raises(ValueError, match="by position or by name"):
        Row(1, name="x")


def test_fields_are_set_by_index_or_name_not_as_attributes():
    row = Row(name="Alice", age=11)
    row[1] = 12
    row["name"] = "Bob"
    assert row == Row(name="Bob", age=12)
    with pytest.raises(AttributeError):
        row.age = 13


def test_as_dict_recursive_turns_nested_rows_into_dicts():
    row = Row(key=1, value=Row(name="a", age=2), more=[Row(x=1)])
    assert row.as_dict() == {"key": 1, "value": Row(name="a", age=2), "more": [Row(x=1)]}
    assert row.as_dict(True) == {"key": 1, "value": {"name": "a", "age": 2}, "more": [{"x": 1}]}


def test_equality_by_names_in_any_order_and_by_kind_and_hashing_agrees():
    assert Row(a=1, b=2) == Row(b=2, a=1)
    assert hash(Row(a=1, b=2)) == hash(Row(b=2, a=1))  # PyFlink's tuple hash differs here; equal rows must hash alike
    assert Row(1, 2) == Row(1, 2) and hash(Row(1, 2)) == hash(Row(1, 2))
    assert Row(1, 2) != Row(a=1, b=2)  # positional and named rows are never equal
    assert Row(1, 2) != (1, 2)
    assert Row.of_kind(RowKind.DELETE, 1) != Row(1)
    assert len({Row(a=1), Row(a=1), Row(a=2)}) == 2


def test_row_kind_prints_flinks_short_form():
    assert [str(k) for k in RowKind] == ["+I", "-U", "+U", "-D"]
    row = Row(1)
    assert row.get_row_kind() is RowKind.INSERT
    row.set_row_kind(RowKind.UPDATE_AFTER)
    assert row.get_row_kind() is RowKind.UPDATE_AFTER


@pytest.mark.parametrize("row", [Row(1, "a"), Row(name="x", age=3), Row.of_kind(RowKind.UPDATE_BEFORE, k=[1, 2])])
def test_rows_pickle_and_copy_with_their_names_and_kind(row):
    for twin in (pickle.loads(pickle.dumps(row)), copy.deepcopy(row), copy.copy(row)):
        assert twin == row and repr(twin) == repr(row) and twin.get_row_kind() is row.get_row_kind()


def test_field_names_can_be_set_and_read_by_name():
    row = Row("Alice", 11)
    row.set_field_names(["name", "age"])
    assert row.name == "Alice" and row.get_fields_by_names(["age", "name"]) == [11, "Alice"]
