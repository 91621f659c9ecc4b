"""Sends a client must not make (issue 23): system topics, transactional half messages without a
transaction plugin, empty bodies, absurd topic names. Each against a real broker process."""

from __future__ import annotations

import pytest
import trio

from kernel import Broker
from kernel.model import SYSFLAG_TRANSACTION_PREPARED, Message, MessageBatch
from kernel.testing import make_config
from tests.interop.conftest import start_broker
from tests.network.wire import batch_body, pull_request, send_request
from wire.remoting import RemotingClient, RequestCode, ResponseCode

SYSTEM_TOPICS = [
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "rmq_sys_wheel_timer",
    "OFFSET_MOVED_EVENT",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_ANYTHING",
    "%DLQ%CG_orders",
]


async def test_client_sends_to_system_topics_are_refused_naming_the_topic(tmp_path):
    broker = start_broker(tmp_path)
    try:
        async with RemotingClient.open() as client:
            for topic in SYSTEM_TOPICS:
                response = await client.invoke(broker.broker, send_request(topic, b"loop?"), 10)
                assert response.code == ResponseCode.NO_PERMISSION, (topic, response.remark)
                assert f"topic[{topic}]" in response.remark and "system topic" in response.remark
            batch = send_request(
                "SCHEDULE_TOPIC_XXXX", batch_body([(b"a", {})]), code=RequestCode.SEND_BATCH_MESSAGE
            )
            assert (await client.invoke(broker.broker, batch, 10)).code == ResponseCode.NO_PERMISSION
            # Retry topics stay writable: a consumer republishes there when send-back fails.
            retry = await client.invoke(broker.broker, send_request("%RETRY%CG_orders", b"again"), 10)
            assert retry.code == ResponseCode.SUCCESS, retry.remark
            ok = await client.invoke(broker.broker, send_request("Orders", b"fine"), 10)
            assert ok.code == ResponseCode.SUCCESS
            # Nothing reached the parking queues.
            for topic in ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"):
                pulled = await client.invoke(broker.broker, pull_request(topic, 0, 0), 10)
                assert pulled.code != ResponseCode.SUCCESS, topic
    finally:
        broker.stop()


async def test_a_store_already_holding_looping_records_stops_growing_after_upgrade(tmp_path):
    """Before the fix a client send put a record with no REAL_TOPIC into the parking topics, and
    the schedulers "delivered" it back there forever. Write such records through the broker's own
    put path (what the old send handler did), then start the fixed broker on that store."""
    data_dir = tmp_path / "data"
    config = make_config(
        broker={
            "plugins": ["store_mmap", "flush_async", "retry_dlq"],
            "data_dir": str(data_dir),
            "graceful_timeout": "5s",
        },
        store_mmap={"commit_log_file_size": "16MiB"},
    )
    old = Broker.assemble(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(old.run)
        for topic in ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"):
            result = await old.put(MessageBatch([Message(topic, b"loops", 0)]))
            assert result.status.stored
        old.request_stop("written")
    broker = start_broker(tmp_path, 'message_delay_level = "1s"', store='commit_log_file_size = "16MiB"')
    try:
        await trio.sleep(3)  # several scheduler and timer rounds
        first = broker.figures()
        await trio.sleep(2)
        second = broker.figures()
        assert first["scheduleDroppedNoRealTopic"] == "1" and first["timerDroppedNoRealTopic"] == "1"
        assert first["scheduleMessageOffset_1"] == second["scheduleMessageOffset_1"] == "1,1"
        assert second["timerDelivered"] == "0" and second["timerPending"] == "0"
        async with RemotingClient.open() as client:
            for topic in ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"):
                behind = await client.invoke(broker.broker, pull_request(topic, 0, 1), 10)
                assert behind.code != ResponseCode.SUCCESS, f"{topic} grew past its one record"
        assert broker.log.read_text().count("names no real topic") == 2
    finally:
        broker.stop()


WITHOUT_TRANSACTIONS = (
    'plugins = ["store_mmap", "flush_async", "flush_sync", "remoting", "namesrv", "allocate", "retry_dlq"]'
)


@pytest.mark.parametrize("transactions", [False, True], ids=["no-plugin", "default-plugins"])
async def test_half_messages_are_never_visible_and_refused_without_a_transaction_plugin(
    tmp_path, transactions
):
    broker = start_broker(tmp_path, "" if transactions else WITHOUT_TRANSACTIONS)
    try:
        async with RemotingClient.open() as client:
            by_property = send_request("Orders", b"half", properties={"TRAN_MSG": "true", "PGROUP": "PG"})
            by_flag = send_request("Orders", b"half")
            by_flag.ext["sysFlag"] = str(SYSFLAG_TRANSACTION_PREPARED)
            for request in (by_property, by_flag):
                request.ext["queueId"] = "0"
                response = await client.invoke(broker.broker, request, 10)
                if transactions:
                    assert response.code == ResponseCode.SUCCESS, response.remark
                else:
                    assert response.code == ResponseCode.MESSAGE_ILLEGAL, response.remark
                    assert "transactional (prepared) messages are not supported" in response.remark
            visible = await client.invoke(broker.broker, pull_request("Orders", 0, 0), 10)
            assert visible.code != ResponseCode.SUCCESS
    finally:
        broker.stop()


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
async def test_empty_bodies_and_absurd_topic_names_get_short_clear_errors(tmp_path, batch):
    broker = start_broker(tmp_path)
    try:
        async with RemotingClient.open() as client:
            if batch:
                request = send_request(
                    "Orders", batch_body([(b"x", {}), (b"", {})]), code=RequestCode.SEND_BATCH_MESSAGE
                )
                expected = "the body of batch message 1 is empty"
            else:
                request = send_request("Orders", b"")
                expected = "the message body is empty"
            response = await client.invoke(broker.broker, request, 10)
            assert (response.code, response.remark) == (ResponseCode.MESSAGE_ILLEGAL, expected)

            long_topic = "T" * 5000
            response = await client.invoke(broker.broker, send_request(long_topic, b"x"), 10)
            assert response.code == ResponseCode.MESSAGE_ILLEGAL
            assert "5000 characters" in response.remark and len(response.remark) < 200
    finally:
        broker.stop()
