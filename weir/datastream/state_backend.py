"""PyFlink's ``pyflink.datastream.state_backend``, on weir: where keyed state
lives while a job runs (``env.set_state_backend(...)``)."""

from weir.runtime.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend, StateBackend

__all__ = ["StateBackend", "HashMapStateBackend", "EmbeddedRocksDBStateBackend"]
