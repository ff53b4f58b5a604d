"""PyFlink's ``pyflink.metrics``, on weir: the user metrics of ``get_metrics_group()``."""

from weir.runtime.metrics import Counter, Distribution, Meter, MetricGroup

__all__ = ["MetricGroup", "Counter", "Meter", "Distribution"]
