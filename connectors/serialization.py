"""Serialization schemas for connectors, with PyFlink's names: records to bytes
and back. They parse text and JSON only: bytes from outside (a Kafka topic, a
file) are never unpickled."""

from __future__ import annotations

import json
from typing import Any


class SerializationSchema:
    def serialize(self, value: Any) -> bytes:
        raise NotImplementedError


class DeserializationSchema:
    def deserialize(self, message: bytes) -> Any:
        raise NotImplementedError


class SimpleStringSchema(SerializationSchema, DeserializationSchema):
    """A record is a string, in ``charset`` (UTF-8 by default)."""

    def __init__(self, charset: str = "UTF-8") -> None:
        self.charset = charset

    def serialize(self, value: Any) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"SimpleStringSchema serializes strings, got {type(value).__name__} {value!r:.80}")
        return value.encode(self.charset)

    def deserialize(self, message: bytes) -> Any:
        return message.decode(self.charset)


class JsonRowSerializationSchema(SerializationSchema):
    """A record as one JSON document (dicts, lists, numbers, strings; a ``Row`` or
    named tuple as an object of its fields). ``builder().with_type_info(t).build()``
    is PyFlink's form; the type is accepted and not checked."""

    def __init__(self, type_info: Any = None) -> None:
        self.type_info = type_info

    @staticmethod
    def builder() -> "_JsonBuilder":
        return _JsonBuilder(JsonRowSerializationSchema)

    def serialize(self, value: Any) -> bytes:
        return json.dumps(_jsonable(value), separators=(",", ":")).encode()


class JsonRowDeserializationSchema(DeserializationSchema):
    """One JSON document per message, as Python values (objects become dicts).
    ``builder().type_info(t).build()`` is PyFlink's form; the type is accepted and
    not checked. ``ignore_parse_errors()`` turns a message that is not JSON into
    None, as PyFlink's does (weir's sources drop None records)."""

    def __init__(self, type_info: Any = None, ignore_parse_errors: bool = False) -> None:
        self.type_info = type_info
        self.ignore_errors = ignore_parse_errors

    @staticmethod
    def builder() -> "_JsonBuilder":
        return _JsonBuilder(JsonRowDeserializationSchema)

    def deserialize(self, message: bytes) -> Any:
        try:
            return json.loads(message)
        except ValueError:
            if self.ignore_errors:
                return None
            raise


class _JsonBuilder:
    def __init__(self, kind: type) -> None:
        self._kind = kind
        self._type_info: Any = None
        self._ignore = False

    def type_info(self, type_info: Any) -> "_JsonBuilder":
        self._type_info = type_info
        return self

    with_type_info = type_info

    def ignore_parse_errors(self) -> "_JsonBuilder":
        self._ignore = True
        return self

    def fail_on_missing_field(self) -> "_JsonBuilder":
        return self

    def build(self) -> Any:
        if self._kind is JsonRowDeserializationSchema:
            return JsonRowDeserializationSchema(self._type_info, self._ignore)
        return JsonRowSerializationSchema(self._type_info)


def _jsonable(value: Any) -> Any:
    as_dict = getattr(value, "as_dict", None) or getattr(value, "_asdict", None)  # Row, named tuple
    return as_dict() if callable(as_dict) else value
