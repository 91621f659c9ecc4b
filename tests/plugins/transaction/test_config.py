"""The transaction keys of a RocketMQ ``broker.properties`` reach ``[transaction]``; the plugin
is in the shipped set, so such a file has transactions without naming a plugin."""

from __future__ import annotations

import functools

import pytest

import kernel
from kernel.errors import ConfigError
from kernel.model import Message, MessageBatch, PutStatus
from plugins.transaction import TransactionConfig
from tests.support import write
from trocket.cli.defaults import TROCKET_DEFAULTS

load_config = functools.partial(kernel.load_config, defaults=TROCKET_DEFAULTS)


def test_rocketmq_transaction_keys_configure_the_plugin(tmp_path):
    config = load_config(
        write(
            tmp_path,
            "broker.properties",
            "brokerName = broker-t\n"
            "transactionCheckInterval = 30000\n"
            "transactionTimeOut = 3000\n"
            "transactionCheckMax = 5\n"
            "transactionOpMsgMaxSize = 1024\n"
            "transactionOpBatchInterval = 500\n"
            "rejectTransactionMessage = true\n",
        )
    )
    assert "transaction" in config.broker.plugins
    section = TransactionConfig(**config.sections["transaction"])
    assert (section.check_interval, section.timeout, section.check_max) == (30.0, 3.0, 5)
    assert (section.op_msg_max_size, section.op_batch_interval) == (1024, 0.5)
    assert section.reject_transaction_message is True


def test_a_bad_value_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="transactionCheckMax"):
        load_config(write(tmp_path, "broker.properties", "transactionCheckMax = many\n"))


async def test_reject_transaction_message_refuses_half_messages(broker_factory):
    async with broker_factory(
        plugins=["transaction"], transaction={"reject_transaction_message": True}
    ) as broker:
        half = Message("Orders", b"x", properties={"TRAN_MSG": "true"})
        refused = await broker.put(MessageBatch([half], "PG"))
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert "rejectTransactionMessage" in refused.remark
        assert (await broker.put(MessageBatch([Message("Orders", b"plain")]))).ok
