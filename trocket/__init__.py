"""Trocket's public face: the client SDK (``trocket.Producer``), the admin client and the
command-line tool. The broker itself is :mod:`kernel` plus :mod:`plugins`."""

from trocket.client import (
    ClientError,
    InvalidMessage,
    Message,
    PendingSend,
    Producer,
    SendError,
    SendResult,
    SendStatus,
    select_by_hash,
    select_by_index,
)

__version__ = "0.1.0"
__all__ = [
    "ClientError",
    "InvalidMessage",
    "Message",
    "PendingSend",
    "Producer",
    "SendError",
    "SendResult",
    "SendStatus",
    "select_by_hash",
    "select_by_index",
]
