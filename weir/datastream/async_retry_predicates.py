"""PyFlink's ``pyflink.datastream.async_retry_predicates``, on weir: predicates for an ``AsyncRetryStrategy``."""

from weir.runtime.async_io import empty_result_predicate, exception_type_predicate, has_exception_predicate

__all__ = ["empty_result_predicate", "has_exception_predicate", "exception_type_predicate"]
