"""PyFlink's ``pyflink.datastream.connectors``, on weir: the bases of sources and
sinks, and ``DeliveryGuarantee``, which is the Kafka connector's and so needs
the kafka extra (it is imported when first asked for)."""

from typing import Any

from weir.runtime.sinks import Sink
from weir.runtime.sources import Source

__all__ = ["Sink", "Source", "DeliveryGuarantee"]


def __getattr__(name: str) -> Any:
    if name == "DeliveryGuarantee":  # without the kafka extra: weir.connectors.kafka's ImportError, naming it
        from weir.connectors.kafka import DeliveryGuarantee

        return DeliveryGuarantee
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
