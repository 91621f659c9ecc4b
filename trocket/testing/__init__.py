"""A real Trocket broker inside a test process (docs/testing.md).

* :mod:`trocket.testing.embedded`: :func:`open_broker` (trio) and :class:`BrokerThread` (any
  test), on free loopback ports, with a chosen plugin list and config;
* :mod:`trocket.testing.pytest_plugin`: the ``trocket`` pytest plugin and its fixtures
  (``trocket_broker``, ``trocket_cluster``, ``trocket_producer``, ``trocket_consumer``).
"""

from trocket.testing.embedded import BrokerSettings, BrokerThread, EmbeddedBroker, open_broker

__all__ = ["BrokerSettings", "BrokerThread", "EmbeddedBroker", "open_broker"]
