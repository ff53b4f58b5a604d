"""Types: PyFlink's factories (pyflink/common/typeinfo.py), their equality and
repr, and how a record is checked and converted to its declared type, the way
PyFlink's serializers hand it to the next operator."""

from __future__ import annotations

import datetime
import decimal
import pickle

import pytest

from weir import InvalidConfigurationError, Row, RowKind, TypeInformation, Types
from weir.runtime.typeinfo import output_type_arg, type_arg

BASIC = [
    "STRING",
    "BYTE",
    "BOOLEAN",
    "SHORT",
    "INT",
    "LONG",
    "FLOAT",
    "DOUBLE",
    "CHAR",
    "BIG_INT",
    "BIG_DEC",
    "INSTANT",
    "SQL_DATE",
    "SQL_TIME",
    "SQL_TIMESTAMP",
    "PICKLED_BYTE_ARRAY",
]


def test_every_factory_gives_equal_hashable_picklable_type_information():
    made = [getattr(Types, name)() for name in BASIC] + [
        Types.ROW([Types.INT(), Types.STRING()]),
        Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()]),
        Types.TUPLE([Types.STRING(), Types.LONG()]),
        Types.PRIMITIVE_ARRAY(Types.INT()),
        Types.BASIC_ARRAY(Types.STRING()),
        Types.OBJECT_ARRAY(Types.ROW([Types.INT()])),
        Types.LIST(Types.DOUBLE()),
        Types.MAP(Types.STRING(), Types.LIST(Types.INT())),
    ]
    remade = pickle.loads(pickle.dumps(made))
    assert all(isinstance(t, TypeInformation) for t in made)
    assert remade == made and [hash(t) for t in remade] == [hash(t) for t in made]
    assert len(set(made)) == len(made)  # all different


def test_reprs_are_pyflinks():
    assert [repr(Types.STRING()), repr(Types.INT()), repr(Types.BIG_DEC()), repr(Types.PICKLED_BYTE_ARRAY())] == [
        "String",
        "Integer",
        "BigDecimal",
        "PickledByteArrayTypeInfo",
    ]
    assert (
        repr(Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()]))
        == "RowTypeInfo(name: String, age: Integer)"
    )
    assert repr(Types.TUPLE([Types.STRING(), Types.LONG()])) == "TupleTypeInfo(String, Long)"
    assert repr(Types.MAP(Types.STRING(), Types.LIST(Types.INT()))) == "MapTypeInfo<String, ListTypeInfo<Integer>>"
    assert repr(Types.PRIMITIVE_ARRAY(Types.INT())) == "PrimitiveArrayTypeInfo<Integer>"


def test_an_unnamed_row_type_names_its_fields_as_flink_does():
    row = Types.ROW([Types.INT(), Types.STRING()])
    assert row.get_field_names() == ["f0", "f1"] and row.get_field_index("f1") == 1 and row.get_field_index("x") == -1
    assert row == Types.ROW_NAMED(["f0", "f1"], [Types.INT(), Types.STRING()])
    assert row != Types.ROW_NAMED(["a", "b"], [Types.INT(), Types.STRING()])


def test_factories_refuse_what_is_not_type_information():
    with pytest.raises(TypeError, match="Types.ROW takes type information"):
        Types.ROW([int])
    with pytest.raises(ValueError, match="a name .* per field type"):
        Types.ROW_NAMED(["a"], [Types.INT(), Types.INT()])
    with pytest.raises(TypeError, match="Types.LIST takes type information"):
        Types.LIST("int")


@pytest.mark.parametrize(
    "type_info, value, converted",
    [
        (Types.INT(), 3, 3),
        (Types.INT(), True, 1),
        (Types.LONG(), -(2**63), -(2**63)),
        (Types.DOUBLE(), 2, 2.0),
        (Types.STRING(), "a", "a"),
        (Types.BOOLEAN(), False, False),
        (Types.BIG_DEC(), decimal.Decimal("1.5"), decimal.Decimal("1.5")),
        (Types.SQL_DATE(), datetime.datetime(2024, 5, 1, 12), datetime.date(2024, 5, 1)),
        (Types.SQL_TIMESTAMP(), datetime.datetime(2024, 5, 1, 12), datetime.datetime(2024, 5, 1, 12)),
        (Types.PICKLED_BYTE_ARRAY(), {"any": object}, {"any": object}),
        (Types.INT(), None, None),
        (Types.TUPLE([Types.STRING(), Types.INT()]), ["a", 1], ("a", 1)),
        (Types.TUPLE([Types.STRING(), Types.INT()]), Row("a", 1), ("a", 1)),
        (Types.LIST(Types.FLOAT()), (1, 2.5), [1.0, 2.5]),
        (Types.PRIMITIVE_ARRAY(Types.BYTE()), bytearray(b"ab"), b"ab"),
        (Types.MAP(Types.STRING(), Types.TUPLE([Types.INT()])), {"a": [1]}, {"a": (1,)}),
    ],
)
def test_records_convert_to_what_pyflink_hands_the_next_operator(type_info, value, converted):
    out = type_info.convert(value)
    assert out == converted and type(out) is type(converted)


def test_a_row_type_makes_rows_with_its_names_from_rows_by_name_or_position():
    person = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])
    assert repr(person.convert(Row("Alice", 11))) == "Row(name='Alice', age=11)"
    assert repr(person.convert(Row(age=11, name="Alice"))) == "Row(name='Alice', age=11)"  # matched by name
    kept = person.convert(Row.of_kind(RowKind.DELETE, "Bob", 3))
    assert kept.get_row_kind() is RowKind.DELETE
    nested = Types.ROW_NAMED(["id", "who"], [Types.INT(), person])
    assert nested.convert(Row(1, Row("Al", 2))).who.name == "Al"


def test_a_row_type_takes_tuples_lists_and_dicts_only_where_records_enter_the_stream():
    person = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])
    for given in (("Alice", 11), ["Alice", 11], {"age": 11, "name": "Alice"}):
        assert person.convert(given, at_source=True) == Row(name="Alice", age=11)
    # PyFlink's row serializer, between operators, takes Row objects only.
    with pytest.raises(TypeError, match=r"takes Row records, got tuple \('Alice', 11\): return Row\(...\)"):
        person.convert(("Alice", 11))


@pytest.mark.parametrize(
    "type_info, value, message",
    [
        (Types.INT(), "3", "Integer takes int, got str '3'"),
        (Types.INT(), 2**31, "out of the range of Integer"),
        (Types.BYTE(), -129, "out of the range of Byte"),
        (Types.STRING(), 3, "String takes str, got int 3"),
        (Types.BOOLEAN(), 1, "Boolean takes bool"),
        (Types.SQL_TIMESTAMP(), datetime.date(2024, 1, 1), "TimestampTypeInfo takes datetime"),
        (Types.TUPLE([Types.INT()]), (1, 2), "has 1 fields, got 2 values"),
        (Types.TUPLE([Types.STRING(), Types.INT()]), ("a", "b"), "field 1: Integer takes int"),
        (
            Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()]),
            Row(name="a", age="b"),
            "field 'age': Integer",
        ),
        (Types.ROW_NAMED(["name"], [Types.STRING()]), Row(nom="a"), "'name' is not a field"),
        (Types.LIST(Types.INT()), "abc", "ListTypeInfo<Integer> takes a list, got str"),
        (Types.MAP(Types.STRING(), Types.INT()), {"a": "b"}, "in MapTypeInfo<String, Integer>: Integer takes int"),
    ],
)
def test_a_record_that_does_not_fit_says_why(type_info, value, message):
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        type_info.convert(value, at_source=True)


def test_type_arguments_are_checked_and_an_output_type_list_is_a_row():
    assert type_arg(None, "key_type") is None and type_arg(Types.INT(), "key_type") == Types.INT()
    assert output_type_arg([Types.INT()], "output_type") == Types.ROW([Types.INT()])
    with pytest.raises(InvalidConfigurationError, match="key_type=<class 'int'>: use type information from Types"):
        type_arg(int, "key_type")
