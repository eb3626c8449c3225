"""rafka: a Kafka-class distributed commit log built as an actor cluster on Ray.

This package is the public API. It imports nothing heavy (no Ray) at import time, so the
storage engine and the CLI's offline tools load fast.
"""

from rafka import errors
from rafka.errors import RafkaError

__version__ = "0.1.0"

__all__ = ["errors", "RafkaError", "__version__"]
