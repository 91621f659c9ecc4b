"""Out of file descriptors, nothing is acknowledged that cannot be delivered (issue 39, items 3
and 4): at ``ulimit -n 1024`` a broker with a few hundred queues once answered SEND_OK while its
dispatch failed with "Too many open files" and retried forever. A `trocket up` process at
``ulimit -n 256`` with 2,000 queues: with small queues pooled (the default) no queue opens a
file at all; with every queue in its own files and the open queue files bounded (the default
bound, a quarter of the limit) every send is acknowledged and consumable and the descriptors
stay few; with the bound set past what the limit allows, the sends that cannot be indexed are
refused naming the limit, and every SEND_OK is still consumable. The broker keeps serving
either way."""

from __future__ import annotations

import json
import os

import pytest

from tests.interop.conftest import start_broker
from tests.network.wire import pull_request, send_request
from wire import record
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

TOPICS, QUEUES = 500, 4
SMALL_QUEUE_FILES = "consume_queue_file_size = 2000\nmessage_index_enable = false\n"


OWN_FILES = "pooled_queue_entries = 0\n"


@pytest.mark.parametrize(
    ("settings", "bounded"),
    [("", True), (OWN_FILES, True), (OWN_FILES + "max_open_queue_files = 100000\n", False)],
    ids=["pooled", "own-files-bounded", "own-files-unbounded"],
)
async def test_at_ulimit_256_with_2000_queues_every_acknowledged_message_is_consumable(
    tmp_path, settings, bounded
):
    store = SMALL_QUEUE_FILES + settings
    broker = start_broker(tmp_path, store=store, open_files=(256, 256))
    try:
        assert "open files: limit 256 (hard 256)" in broker.log.read_text()
        acked: dict[tuple[str, int], bytes] = {}
        refusals: set[str] = set()
        async with RemotingClient.open() as client:  # one connection: the broker has no fd to spare
            for t in range(TOPICS):
                topic = f"Scale{t}"
                create = RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    {"topic": topic, "readQueueNums": QUEUES, "writeQueueNums": QUEUES, "perm": 6},
                )
                created = await client.invoke(broker.broker, create, 10)
                assert created.code == ResponseCode.SUCCESS, created.remark
            for t in range(TOPICS):
                for queue_id in range(QUEUES):
                    body = f"m-{t}-{queue_id}".encode()
                    answer = await client.invoke(
                        broker.broker, send_request(f"Scale{t}", body, queue_id=queue_id), 10
                    )
                    if answer.code == ResponseCode.SUCCESS:
                        acked[(f"Scale{t}", queue_id)] = body
                    else:
                        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, answer.remark
                        refusals.add(answer.remark)
                        assert answer.remark.startswith("cannot open the consume queue ")
                        assert "open-files limit is reached (RLIMIT_NOFILE 256, hard 256)" in answer.remark
            if bounded:
                assert len(acked) == TOPICS * QUEUES, refusals
                assert len(os.listdir(f"/proc/{broker.process.pid}/fd")) < 200
            else:
                assert 10 < len(acked) < TOPICS * QUEUES, len(acked)
            for (topic, queue_id), body in acked.items():
                pulled = await client.invoke(broker.broker, pull_request(topic, queue_id, 0), 10)
                assert pulled.code == ResponseCode.SUCCESS, (topic, queue_id, pulled.remark)
                assert [m.body for m in record.decode_records(pulled.body)] == [body]
            status = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
            figures = json.loads((await client.invoke(broker.broker, status, 10)).body)["table"]
        assert figures["dispatchBehindBytes"] == "0"
        assert broker.process.poll() is None
        assert bool(refusals) is not bounded  # refused only when the bound lets files exhaust the limit
        if not settings:  # pooled: one message per queue opened no queue file
            assert not list((tmp_path / "data" / "consumequeue").rglob("0000*"))
    finally:
        broker.stop()


def test_the_soft_limit_is_raised_to_the_hard_one_at_start(tmp_path):
    broker = start_broker(tmp_path, open_files=(256, 4096))
    try:
        assert "open files: limit raised from 256 to 4096 (the hard limit)" in broker.log.read_text()
    finally:
        broker.stop()
