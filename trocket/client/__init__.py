"""The client SDK: applications produce and consume with it as with RocketMQ's clients."""

from trocket.client.blocking_producer import BlockingProducer
from trocket.client.consumer.listener import ConsumeContext, ConsumeStatus, OrderlyStatus
from trocket.client.consumer.lite_pull import LitePullConsumer
from trocket.client.consumer.modes import ConsumeFromWhere, MessageModel
from trocket.client.consumer.push import PushConsumer
from trocket.client.consumer.received import ReceivedMessage
from trocket.client.consumer.simple import PoppedMessage, SimpleConsumer
from trocket.client.errors import ClientError, InvalidMessage, SendError
from trocket.client.message import Message, SendResult, SendStatus
from trocket.client.producer import PendingSend, Producer
from trocket.client.selectors import select_by_hash, select_by_index
from trocket.client.tls import tls_context
from trocket.client.transaction import TransactionProducer, TransactionSendResult, TransactionState
from wire.remoting.signature import SessionCredentials

__all__ = [
    "BlockingProducer",
    "ClientError",
    "ConsumeContext",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "LitePullConsumer",
    "MessageModel",
    "OrderlyStatus",
    "PushConsumer",
    "ReceivedMessage",
    "InvalidMessage",
    "Message",
    "PendingSend",
    "PoppedMessage",
    "Producer",
    "SendError",
    "SendResult",
    "SendStatus",
    "SessionCredentials",
    "SimpleConsumer",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
    "select_by_hash",
    "select_by_index",
    "tls_context",
]
