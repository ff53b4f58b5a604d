"""PyFlink's ``pyflink.datastream.formats``, on weir: ``csv``, ``json`` and ``parquet``."""
