"""``[transaction]``: half-message check-back and op-record settings, under RocketMQ's names
in ``broker.properties``."""

from __future__ import annotations

import attrs

from kernel.config import fields
from kernel.config import property_aliases as rocketmq


@attrs.frozen(kw_only=True)
class TransactionConfig:
    check_interval: float = fields.duration("60s")
    """How often pending half messages are scanned for a check-back (``transactionCheckInterval``;
    RocketMQ 4.x waits 60 s, 5.x 30 s)."""
    timeout: float = fields.duration("6s")
    """Age (since the producer sent it) before a half message with no end is checked
    (``transactionTimeOut``); a message's own ``CHECK_IMMUNITY_TIME_IN_SECONDS`` overrides it
    upwards."""
    check_max: int = fields.integer(15, minimum=1)
    """Check-backs before an unresolved half message is given up and moved to
    ``TRANS_CHECK_MAX_TIME_TOPIC`` (``transactionCheckMax``)."""
    op_msg_max_size: int = fields.size(4096, minimum=16)
    """Op-record body size (comma-separated half offsets) that makes a batch of rollback op
    records be written before ``op_batch_interval`` (``transactionOpMsgMaxSize``)."""
    op_batch_interval: float = fields.duration("3s")
    """Longest a rollback's op record waits to be written with others
    (``transactionOpBatchInterval``). A commit's op record is never delayed: it is appended
    with the committed message."""
    reject_transaction_message: bool = fields.boolean(False)
    """Refuse transactional sends with NO_PERMISSION (``rejectTransactionMessage``)."""
    progress_persist_interval: float = fields.duration("5s")
    """How often the scan position is written to ``config/transactionProgress.json`` when it
    moved (it is also written after every scan that sent checks, and at stop)."""


PROPERTIES = {
    "transactionCheckInterval": rocketmq.milliseconds_alias("check_interval"),
    "transactionTimeOut": rocketmq.milliseconds_alias("timeout"),
    "transactionCheckMax": rocketmq.integer_alias("check_max", "a whole number"),
    "transactionOpMsgMaxSize": rocketmq.integer_alias("op_msg_max_size", "a size in bytes"),
    "transactionOpBatchInterval": rocketmq.milliseconds_alias("op_batch_interval"),
    "rejectTransactionMessage": rocketmq.boolean_alias("reject_transaction_message"),
}
"""The RocketMQ ``broker.properties`` keys of ``[transaction]``."""
