"""The transaction producer (RocketMQ's ``TransactionMQProducer``): make "write my database row
and publish the event" atomic.

    def execute(message, arg):             # runs after the broker holds the half message
        with db.begin():
            db.insert_order(arg)
        return TransactionState.COMMIT     # or ROLLBACK, or UNKNOW to let the broker ask later

    def check(message):                    # the broker asks about a transaction nobody ended
        return TransactionState.COMMIT if db.has_order(message.keys[0]) else TransactionState.ROLLBACK

    async with TransactionProducer("PG_orders", "127.0.0.1:9876", check_listener=check) as producer:
        result = await producer.send_message_in_transaction(Message("Orders", b"..."), execute, order)

The message is sent as a half message (``TRAN_MSG=true``, prepared sysFlag): stored, invisible to
consumers. The executor runs; its answer goes to the broker as ``END_TRANSACTION``. A commit
makes the message visible; a rollback discards it; no answer (UNKNOW, an exception, a crash) is
resolved by the broker's check-back, which calls ``check_listener`` on any producer of the group.
Both callables may be plain or ``async`` functions. The producer heartbeats its group to the
brokers it sent to, so they know where to send check-backs.
"""

from __future__ import annotations

import enum
import inspect
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from kernel.errors import CorruptRecord, RemotingError
from kernel.model import (
    PROPERTY_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from kernel.model import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ_KEY
from trocket.client.errors import ClientError, InvalidMessage
from trocket.client.message import Message, SendResult, SendStatus
from trocket.client.producer import Producer
from trocket.client.sending import identified
from trocket.client.trace import transaction_ended
from wire.record import StoredMessage, decode_record, parse_offset_msg_id
from wire.remoting import Connection, RemotingCommand, RequestCode, Router

log = logging.getLogger(__name__)

PROPERTY_PRODUCER_GROUP = "PGROUP"


class TransactionState(enum.Enum):
    """A local transaction's outcome (RocketMQ's ``LocalTransactionState``)."""

    COMMIT = SYSFLAG_TRANSACTION_COMMIT
    ROLLBACK = SYSFLAG_TRANSACTION_ROLLBACK
    UNKNOW = 0
    """Not known yet (RocketMQ's spelling): the broker asks again later."""


TRACE_STATES = {
    TransactionState.COMMIT: "COMMIT_MESSAGE",
    TransactionState.ROLLBACK: "ROLLBACK_MESSAGE",
    TransactionState.UNKNOW: "UNKNOW",
}
"""``LocalTransactionState`` names, as EndTransaction trace records carry them."""

LocalTransactionExecutor = Callable[[Message, Any], "TransactionState | Awaitable[TransactionState]"]
CheckListener = Callable[[StoredMessage], "TransactionState | Awaitable[TransactionState]"]


@attrs.frozen
class TransactionSendResult:
    """The half message's send result and what the local transaction decided."""

    send_result: SendResult
    local_state: TransactionState
    transaction_id: str


@attrs.define(eq=False)
class TransactionProducer(Producer):
    """See the module docstring. Every option of :class:`Producer` applies to the half send."""

    check_listener: CheckListener | None = None
    """Answers the broker's check-backs; without one they are answered UNKNOW (logged)."""

    async def send_message_in_transaction(
        self,
        message: Message,
        executor: LocalTransactionExecutor,
        arg: Any = None,
        *,
        timeout: float | None = None,
    ) -> TransactionSendResult:
        """Send ``message`` as a half message, run ``executor(message, arg)``, end the transaction
        with its answer. A send that is not SEND_OK is rolled back without running the executor
        (as RocketMQ's producer does); an executor that raises counts as UNKNOW.

        :raises InvalidMessage: a delayed message (a transaction cannot be delayed) or one
            that cannot be sent at all.
        :raises SendError: the half message could not be sent.
        """
        if message.delay_level > 0:
            raise InvalidMessage("a transactional message cannot have a delay level")
        body, sys_flag = self._rules.body(message)
        properties = identified(message)
        properties[PROPERTY_TRANSACTION_PREPARED] = "true"
        properties[PROPERTY_PRODUCER_GROUP] = self.group
        transaction_id = properties[PROPERTY_UNIQ_KEY]
        await self._ensure_heartbeat(message.topic)
        request = self._rules.request(
            message.topic, message.flag, sys_flag | SYSFLAG_TRANSACTION_PREPARED, properties, body
        )
        half = attrs.evolve(message, properties={**message.properties, PROPERTY_TRANSACTION_PREPARED: "true"})
        traced = (half,) if self._tracer is not None else ()
        result = await self._send(message.topic, request, transaction_id, None, None, None, timeout, traced)
        remark = None
        if result.status is SendStatus.SEND_OK:
            try:
                state = await _call(executor, message, arg)
            except Exception as error:  # noqa: BLE001 - the application's code: its failure is "not known"
                log.warning("local transaction %s raised %r: left to the check-back", transaction_id, error)
                state, remark = TransactionState.UNKNOW, f"executeLocalTransactionBranch exception: {error!r}"
        else:
            state = TransactionState.ROLLBACK
        await self._end(message, result, transaction_id, state, remark)
        return TransactionSendResult(result, state, transaction_id)

    async def _end(
        self,
        message: Message,
        result: SendResult,
        transaction_id: str,
        state: TransactionState,
        remark: str | None,
    ) -> None:
        remoting, routes = self._started()
        info = await routes.publish_info(result.queue.topic)
        address = info.addresses.get(result.queue.broker_name)
        if address is None:
            log.warning("transaction %s: broker %s has no master now; the check-back will end it",
                        transaction_id, result.queue.broker_name)  # fmt: skip
            return
        _, commit_log_offset = parse_offset_msg_id(result.offset_msg_id)
        header = {
            "producerGroup": self.group,
            "tranStateTableOffset": result.queue_offset,
            "commitLogOffset": commit_log_offset,
            "commitOrRollback": state.value,
            "fromTransactionCheck": False,
            "msgId": result.msg_id,
            "transactionId": transaction_id,
            "topic": result.queue.topic,
            "brokerName": result.queue.broker_name,
        }
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, header)
        request.remark = remark
        try:
            await remoting.invoke_oneway(address, request)
        except RemotingError as error:  # as RocketMQ: the check-back resolves it
            log.warning("transaction %s: END_TRANSACTION to %s failed (%s); the check-back will end it",
                        transaction_id, address, error)  # fmt: skip
            return
        if self._tracer is not None:
            self._tracer.append(
                [
                    transaction_ended(
                        self.group,
                        message,
                        result,
                        store_host=address,
                        transaction_id=transaction_id,
                        state=TRACE_STATES[state],
                    )  # fmt: skip
                ]
            )

    # --- check-backs ------------------------------------------------------------------------

    def _router(self) -> Router:
        router = Router(name=f"producer {self.group}")
        router.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)
        return router

    async def _on_check(self, connection: Connection, request: RemotingCommand) -> None:
        """Answered in a task of its own: the listener may take time, or send through this
        very connection, and the connection must keep reading meanwhile."""
        if self._nursery is None:
            return
        self._nursery.start_soon(self._answer_check, connection, request)

    async def _answer_check(self, connection: Connection, request: RemotingCommand) -> None:
        ext = request.ext
        try:
            message = decode_record(request.body)
        except (CorruptRecord, ValueError, struct.error, IndexError) as error:  # nothing to check
            log.warning("check-back from %s with an undecodable message: %s", connection.peer, error)
            return
        transaction_id = str(ext.get("transactionId") or message.properties.get(PROPERTY_UNIQ_KEY, ""))
        remark = None
        if self.check_listener is None:
            state, remark = TransactionState.UNKNOW, "the producer has no check listener"
            log.warning(
                "transaction %s checked, but producer %s has no check listener", transaction_id, self.group
            )
        else:
            try:
                state = await _call(self.check_listener, message)
            except Exception as error:  # noqa: BLE001 - the application's code
                log.warning("check listener raised %r for transaction %s", error, transaction_id)
                state, remark = TransactionState.UNKNOW, f"checkLocalTransactionState Exception: {error!r}"
        header = {
            "producerGroup": self.group,
            "tranStateTableOffset": ext.get("tranStateTableOffset", ""),
            "commitLogOffset": ext.get("commitLogOffset", ""),
            "commitOrRollback": state.value,
            "fromTransactionCheck": True,
            "msgId": message.properties.get(PROPERTY_UNIQ_KEY, "") or str(ext.get("msgId", "")),
            "transactionId": transaction_id,
            "topic": message.topic,
            "brokerName": ext.get("brokerName", ""),
        }
        answer = RemotingCommand.request(RequestCode.END_TRANSACTION, header)
        answer.remark = remark
        if not connection.closed and self._remoting is not None:
            connection.send_oneway(self._remoting.signed(answer))

    # --- heartbeats -------------------------------------------------------------------------

    async def _ensure_heartbeat(self, topic: str) -> None:
        """Heartbeat the topic's brokers that have not heard from this connection yet, before
        the half message goes out: the broker must know whom to ask about it."""
        _, routes = self._started()
        info = await routes.publish_info(topic)
        assert self._heartbeats is not None
        for address in info.addresses.values():
            await self._heartbeats.tell(address, only_if_new=True)


async def _call(function: Callable[..., Any], *args: Any) -> TransactionState:
    answer = function(*args)
    if inspect.isawaitable(answer):
        answer = await answer
    if not isinstance(answer, TransactionState):
        raise ClientError(
            f"{getattr(function, '__name__', function)!r} returned {answer!r}, not a TransactionState"
        )
    return answer
