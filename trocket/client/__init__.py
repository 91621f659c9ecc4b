"""The client SDK: applications produce (and, later, consume) with it as with RocketMQ's clients."""

from trocket.client.errors import ClientError, InvalidMessage, SendError
from trocket.client.message import Message, SendResult, SendStatus
from trocket.client.producer import PendingSend, Producer
from trocket.client.selectors import select_by_hash, select_by_index

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
