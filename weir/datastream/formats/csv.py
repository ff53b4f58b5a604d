"""PyFlink's ``pyflink.datastream.formats.csv``, on weir: reading CSV files
(no CSV writers or row serialization schemas)."""

from weir.connectors.formats import CsvReaderFormat, CsvSchema, CsvSchemaBuilder

__all__ = ["CsvSchema", "CsvSchemaBuilder", "CsvReaderFormat"]
