"""PyFlink's ``pyflink.datastream.formats.parquet``, on weir: Parquet in and out
through pyarrow (no Avro readers or writers)."""

from weir.connectors.formats import ParquetBulkWriters, ParquetColumnarRowInputFormat

__all__ = ["ParquetColumnarRowInputFormat", "ParquetBulkWriters"]
