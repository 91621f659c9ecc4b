"""What a plugin may ask about the clients connected to this broker.

Connections belong to whichever plugin serves the broker's port (``remoting``); a plugin that
must call a client back (a transaction check-back asks a producer of the message's group)
finds them here, through :data:`CLIENT_DIRECTORY`, without importing that plugin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kernel.context import StashKey
from wire.remoting import Connection


class ClientDirectory(Protocol):
    """Clients known from their heartbeats (RocketMQ's producer and consumer managers)."""

    def producer_connections(self, group: str) -> Sequence[Connection]:
        """Open connections of the producers of ``group``, the most recently heard from first;
        empty when none is online."""
        ...


CLIENT_DIRECTORY = StashKey[ClientDirectory]("kernel.client_directory")
"""Set in ``ctx.stash`` by the plugin serving the broker's port once it runs; absent on a
broker without one (then nobody can be called back)."""
