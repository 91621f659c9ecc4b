"""transaction: RocketMQ's transactional messages (half messages, commit/rollback, check-back).

- ``trocket_before_append``: a prepared send (``TRAN_MSG=true`` or the prepared sysFlag) is
  rewritten to wait in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (see :mod:`.half`); with
  ``reject_transaction_message`` it is refused.
- ``trocket_register_request_handlers``: ``END_TRANSACTION`` (37) and Trocket's
  ``QUERY_PENDING_TRANSACTIONS`` admin query, see :mod:`.end`.
- ``trocket_register_services``: the :class:`~.service.TransactionService` (SCHEDULING phase):
  op records, check-back (``CHECK_TRANSACTION_STATE``, 39, to a producer of the group) and the
  durable scan position ``config/transactionProgress.json``.
- ``trocket_runtime_figures``: half and op queue figures for ``brokerStatus``.

Settings: ``[transaction]`` (``transactionCheckInterval``, ``transactionTimeOut``,
``transactionCheckMax``, ... in ``broker.properties``). Guide: docs/transactions.md.
"""

from __future__ import annotations

from kernel import ConfigSection, Phase, RequestHandlerSpec, ServiceSpec, hookimpl
from kernel.context import BrokerContext, BrokerRuntime
from kernel.model import (
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    MessageBatch,
    PutStatus,
    Rejection,
)
from plugins.transaction.config import PROPERTIES, TransactionConfig
from plugins.transaction.end import handle_end_transaction, handle_query_pending
from plugins.transaction.half import HALF_TOPIC, to_half
from plugins.transaction.service import TRANSACTIONS, TransactionService
from wire.remoting import RequestCode

__all__ = ["TRANSACTIONS", "TransactionConfig", "TransactionService"]


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("transaction", TransactionConfig, PROPERTIES)]


@hookimpl
def trocket_before_append(batch: MessageBatch, ctx: BrokerContext) -> Rejection | None:
    """Move every prepared message of the batch to the half queue."""
    encoded = batch.encoded
    if encoded is not None:
        prepared = encoded.sys_flag & SYSFLAG_TRANSACTION_ROLLBACK == SYSFLAG_TRANSACTION_PREPARED
        if prepared:
            return Rejection(
                PutStatus.MESSAGE_ILLEGAL,
                "a batch cannot be transactional: send each transactional message on its own",
            )
        if not encoded.needs_attention():
            return None  # no message asks for a transaction (or a delay): the batch stays columns
    reject = None
    for message in batch.messages:
        if message.topic == HALF_TOPIC or not message.is_prepared:
            continue
        if reject is None:
            reject = ctx.plugin_config(TransactionConfig).reject_transaction_message
        if reject:
            return Rejection(
                PutStatus.SERVICE_NOT_AVAILABLE,
                f"sending transaction message is forbidden on broker {ctx.broker.broker_name} "
                "([transaction] reject_transaction_message, rejectTransactionMessage)",
            )
        to_half(message, batch.producer_group)
    return None


@hookimpl
def trocket_register_request_handlers(ctx: BrokerContext) -> list[RequestHandlerSpec]:
    return [
        RequestHandlerSpec(RequestCode.END_TRANSACTION, "transaction", handle_end_transaction),
        RequestHandlerSpec(RequestCode.QUERY_PENDING_TRANSACTIONS, "transaction", handle_query_pending),
    ]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make(runtime: BrokerRuntime) -> TransactionService:
        service = TransactionService(
            runtime,
            runtime.ctx.plugin_config(TransactionConfig),
            runtime.ctx.data_dir / "config" / "transactionProgress.json",
        )
        runtime.ctx.stash[TRANSACTIONS] = service
        return service

    return [ServiceSpec("transaction", Phase.SCHEDULING, make)]


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    service = ctx.stash.get(TRANSACTIONS, None)
    return service.figures() if service is not None else {}
