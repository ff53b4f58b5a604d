"""PyFlink's ``pyflink.common.serialization``, on weir: the connectors' schemas
and the row-format file sink's ``Encoder``."""

from weir.connectors.files import BulkWriterFactory, Encoder
from weir.connectors.serialization import DeserializationSchema, SerializationSchema, SimpleStringSchema

__all__ = ["SerializationSchema", "DeserializationSchema", "SimpleStringSchema", "Encoder", "BulkWriterFactory"]
