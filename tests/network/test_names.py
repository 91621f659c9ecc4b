"""Group and topic names are checked where they enter (issue 40, item 2): a group name like
``../../x`` once made the broker create its ``%DLQ%`` consume queue outside the data directory,
and a topic with a trailing newline was created. Driven against a real broker process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel.errors import StoreError
from plugins.store_mmap.consume_queue import ConsumeQueues
from tests.interop.conftest import start_broker
from tests.network.wire import send_request
from wire.names import GROUP_MAX_LENGTH, group_problem, topic_problem
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

ESCAPE = "../../../../escape_probe"


def _heartbeat(group: object, topic: object = "Orders") -> RemotingCommand:
    body = {
        "clientID": "127.0.0.1@probe",
        "consumerDataSet": [
            {"groupName": group, "subscriptionDataSet": [{"topic": topic, "subString": "*"}]}
        ],
    }
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(body).encode())


def _send_back(group: str, offset: int) -> RemotingCommand:
    ext = {"group": group, "offset": offset, "delayLevel": -1, "originMsgId": "O-1"}
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext)


def _escaped_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if "escape_probe" in p.name]


async def test_bad_group_and_topic_names_are_refused_and_nothing_leaves_the_data_directory(tmp_path):
    run = tmp_path / "a" / "b" / "run"  # room above the data directory for ``..`` to reach
    run.mkdir(parents=True)
    broker = start_broker(run)
    try:
        async with RemotingClient.open() as client:
            sent = await client.invoke(broker.broker, send_request("Orders", b"x"), 10)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            offset = int(sent.ext["offset"]) if "offset" in sent.ext else 0

            for group in (ESCAPE, ["x"], "a/b", "g\n", "G" * (GROUP_MAX_LENGTH + 1), ""):
                answer = await client.invoke(broker.broker, _heartbeat(group), 10)
                assert answer.code == ResponseCode.SYSTEM_ERROR, group
                assert "heartbeat consumerDataSet groupName: the group" in answer.remark
            answer = await client.invoke(broker.broker, _heartbeat("CG_ok", "../t"), 10)
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert "subscriptionDataSet topic: the topic '../t' contains characters" in answer.remark

            answer = await client.invoke(broker.broker, _send_back(ESCAPE, offset), 10)
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert answer.remark == (
                f"group: the group {ESCAPE!r} contains characters outside [%|a-zA-Z0-9_-]"
            )
            create = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                {},
                json.dumps({"groupName": ESCAPE}).encode(),
            )
            assert (await client.invoke(broker.broker, create, 10)).code == ResponseCode.SYSTEM_ERROR

            # A trailing newline is not a topic (the check once used a match that allowed it).
            answer = await client.invoke(broker.broker, send_request("nlt\n", b"x"), 10)
            assert answer.code == ResponseCode.MESSAGE_ILLEGAL
            create_topic = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "nlt\n", "readQueueNums": 1}
            )
            assert (await client.invoke(broker.broker, create_topic, 10)).code == ResponseCode.SYSTEM_ERROR

            # Valid names still work end to end: the group's dead letter is stored.
            assert (await client.invoke(broker.broker, _heartbeat("CG_ok"), 10)).code == ResponseCode.SUCCESS
            answer = await client.invoke(broker.broker, _send_back("CG_ok", offset), 10)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            every = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {})
            topics = json.loads((await client.invoke(broker.broker, every, 10)).body)["topicConfigTable"]
        assert {"Orders", "%RETRY%CG_ok", "%DLQ%CG_ok"} <= set(topics)
        assert all(topic_problem(name) is None for name in topics), sorted(topics)
    finally:
        broker.stop()
    assert _escaped_files(tmp_path) == []


def test_the_store_refuses_a_consume_queue_outside_its_root(tmp_path):
    """The store's own guard, behind the put pipeline's topic check."""
    queues = ConsumeQueues.load(tmp_path / "consumequeue", 4096)
    for topic in ("../escape_probe", "..", "a/b", "", "x\0y"):
        with pytest.raises(StoreError, match="would not be a directory inside"):
            queues.queue(topic, 0, create=True)
    assert queues.queue("%DLQ%CG", 0, create=True) is not None
    assert _escaped_files(tmp_path) == []


@pytest.mark.parametrize(
    ("name", "ok"),
    [("Orders", True), ("%RETRY%CG-1|x_y", True), ("nlt\n", False), ("a.b", False), ("a b", False)],
)
def test_name_rules_are_rocketmqs_with_a_full_match(name, ok):
    assert (topic_problem(name) is None) is ok
    assert (group_problem(name) is None) is ok
    assert topic_problem("T" * 127) is None and topic_problem("T" * 128) is not None
    assert group_problem("G" * GROUP_MAX_LENGTH) is None
    assert topic_problem("%RETRY%" + "G" * GROUP_MAX_LENGTH) is None  # a group's retry topic fits
