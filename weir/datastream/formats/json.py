"""PyFlink's ``pyflink.datastream.formats.json``, on weir: JSON rows to bytes and back."""

from weir.connectors.serialization import JsonRowDeserializationSchema, JsonRowSerializationSchema

__all__ = ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"]
