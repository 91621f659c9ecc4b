"""mqadmin's operator commands (issue 37) as a user runs them, against a real `trocket up`:
updateTopicPerm, topicClusterList, printMsg, printMsgByQueue, allocateMQ, cloneGroupOffset,
skipAccumulatedMessage, updateKvConfig, deleteKvConfig."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import trio

from tests.interop.conftest import RunningBroker, start_broker, subprocess_env
from wire.remoting import RemotingClient, RemotingCommand, RequestCode

TOPIC = "ToolboxOrders"


def trocket(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trocket", *args], capture_output=True, text=True, timeout=60,
        env=subprocess_env(), input=stdin,
    )  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    running = start_broker(tmp_path_factory.mktemp("toolbox"))
    try:
        running.admin("updateTopic", "-b", running.broker, "-t", TOPIC, "-r", "4", "-w", "4")
        for tag, count in (("paid", 6), ("refund", 2)):
            body = f"{tag} order {{i}}"
            sent = trocket(
                "produce", "-n", running.namesrv, "-t", TOPIC, "--tag", tag, "-b", body, "-c", str(count)
            )
            assert sent.returncode == 0, sent.stderr
        yield running
    finally:
        running.stop()


def bodies(queues: list[dict]) -> list[str]:
    return sorted(m["body"] for q in queues for m in q["messages"])


def broker_name(broker: RunningBroker) -> str:
    return broker.admin_json("topicRoute", "-t", TOPIC)["brokerDatas"][0]["brokerName"]


def test_print_msg_reads_every_queue_filtered_by_tag_and_time(broker):
    everything = broker.admin_json("printMsg", "-t", TOPIC)
    assert len(everything) == 4
    assert bodies(everything) == sorted(
        [f"paid order {i}" for i in range(6)] + ["refund order 0", "refund order 1"]
    )
    refunds = broker.admin_json("printMsg", "-t", TOPIC, "-s", "refund")
    assert bodies(refunds) == ["refund order 0", "refund order 1"]
    future = str(int(time.time() * 1000) + 3_600_000)
    assert bodies(broker.admin_json("printMsg", "-t", TOPIC, "-b", future)) == []
    text = broker.admin("printMsg", "-t", TOPIC, "-d", "false").stdout
    assert text.count("MSGID: ") == 8 and "BODY: NOT PRINT BODY" in text and "minOffset=0" in text


def test_print_msg_by_queue_reads_one_queue_and_counts_tags(broker):
    name = broker_name(broker)
    queues = broker.admin_json("printMsgByQueue", "-t", TOPIC, "-a", name, "-i", "1", "-p")
    assert [q["queueId"] for q in queues] == [1]
    assert {m["queueId"] for m in queues[0]["messages"]} == {1}
    assert sum(row["#Count"] for row in queues[0]["tags"]) == len(queues[0]["messages"]) > 0
    missing = broker.admin("printMsgByQueue", "-t", TOPIC, "-a", "no-such-broker", "-i", "0", check=False)
    assert missing.returncode == 1 and "no queue 0 on broker 'no-such-broker'" in missing.stderr


def test_update_topic_perm_makes_a_topic_read_only_and_back(broker):
    lines = broker.admin("updateTopicPerm", "-b", broker.broker, "-t", TOPIC, "-p", "4").stdout
    assert "update topic perm from 6 to 4" in lines
    refused = trocket("produce", "-n", broker.namesrv, "-t", TOPIC, "-b", "late")
    assert refused.returncode != 0
    assert (
        "equals to the old one"
        in broker.admin("updateTopicPerm", "-b", broker.broker, "-t", TOPIC, "-p", "4").stdout
    )
    assert (
        "from 4 to 6"
        in broker.admin("updateTopicPerm", "-c", "DefaultCluster", "-t", TOPIC, "-p", "6").stdout
    )
    bad = broker.admin("updateTopicPerm", "-b", broker.broker, "-t", TOPIC, "-p", "3", check=False)
    assert bad.returncode == 1 and "perm must be 2" in bad.stderr


def test_topic_cluster_list_names_the_cluster(broker):
    assert broker.admin("topicClusterList", "-t", TOPIC).stdout.split() == ["DefaultCluster"]


def test_allocate_mq_splits_the_queues_as_consumers_will(broker):
    result = broker.admin_json("allocateMQ", "-t", TOPIC, "-i", "10.0.0.2@1,10.0.0.1@1")["result"]
    first, second = result["10.0.0.1@1"], result["10.0.0.2@1"]
    assert [q["queueId"] for q in first] == [0, 1] and [q["queueId"] for q in second] == [2, 3]
    unknown = broker.admin("allocateMQ", "-t", TOPIC, "-i", "a", "--strategy", "nope", check=False)
    assert unknown.returncode == 1 and "nope" in unknown.stderr


def progress(broker: RunningBroker, group: str) -> dict[int, int]:
    rows = broker.admin_json("consumerProgress", "-g", group)
    return {r["#QID"]: r["#Consumer Offset"] for r in rows if r["#Topic"] == TOPIC}


def test_clone_group_offset_and_skip_accumulated_message(broker):
    consumed = trocket(
        "consume", "-n", broker.namesrv, "-g", "CG_tbx_src", "-t", TOPIC, "--from", "first", "-c", "5"
    )
    assert consumed.returncode == 0, consumed.stderr
    source = progress(broker, "CG_tbx_src")
    assert sum(source.values()) >= 5  # what it printed, at least
    rows = broker.admin_json("cloneGroupOffset", "-s", "CG_tbx_src", "-d", "CG_tbx_copy", "-t", TOPIC)
    assert {r["#queueId"]: r["#offset"] for r in rows} == source
    assert progress(broker, "CG_tbx_copy") == source
    skipped = broker.admin_json("skipAccumulatedMessage", "-g", "CG_tbx_skip", "-t", TOPIC)
    ends = {r["#queueId"]: r["#offset"] for r in skipped}
    assert sum(ends.values()) == 8 and progress(broker, "CG_tbx_skip") == ends
    none = broker.admin("cloneGroupOffset", "-s", "CG_never", "-d", "X", "-t", TOPIC, check=False)
    assert none.returncode == 1 and "CG_never" in none.stderr


async def kv_value(namesrv: str, namespace: str, key: str) -> str | None:
    async with RemotingClient.open() as client:
        answer = await client.invoke(
            namesrv,
            RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key}),
            5,
        )
    return answer.ext.get("value") if answer.code == 0 else None


def test_kv_config_is_set_and_deleted_on_the_namesrv(broker):
    out = broker.admin("updateKvConfig", "-s", "ORDER_TOPIC_CONFIG", "-k", TOPIC, "-v", "broker-a:4").stdout
    assert "update kv config in namespace success." in out
    assert trio.run(kv_value, broker.namesrv, "ORDER_TOPIC_CONFIG", TOPIC) == "broker-a:4"
    assert "success" in broker.admin("deleteKvConfig", "-s", "ORDER_TOPIC_CONFIG", "-k", TOPIC).stdout
    assert trio.run(kv_value, broker.namesrv, "ORDER_TOPIC_CONFIG", TOPIC) is None
    assert json.loads(broker.admin("updateKvConfig", "-s", "N", "-k", "K", "-v", "V", "--json").stdout) == [
        "update kv config in namespace success."
    ]


def test_broker_consume_stats_lists_each_groups_lag(broker):
    consumed = trocket(
        "consume", "-n", broker.namesrv, "-g", "CG_tbx_stats", "-t", TOPIC, "--from", "first", "-c", "3"
    )
    assert consumed.returncode == 0, consumed.stderr
    stats = broker.admin_json("brokerConsumeStats", "-b", broker.broker)
    mine = [r for r in stats["rows"] if r["#Group"] == "CG_tbx_stats" and r["#Topic"] == TOPIC]
    assert len(mine) == 4  # and the group's retry topic, also in the rows
    assert sum(r["#Broker Offset"] for r in mine) == 8
    assert sum(r["#Diff"] for r in mine) == 8 - sum(r["#Consumer Offset"] for r in mine)
    assert stats["totalDiff"] >= sum(r["#Diff"] for r in mine)
    lagging = broker.admin_json("brokerConsumeStats", "-b", broker.broker, "-l", "1000")
    assert lagging["rows"] == []
    text = broker.admin("brokerConsumeStats", "-b", broker.broker).stdout
    assert "#Consumer Offset" in text and "Diff Total:" in text


async def test_producer_connection_lists_a_running_producer(broker):
    from trocket import Message, Producer

    async with Producer("PG_tbx_online", broker.namesrv) as producer:
        await producer.send(Message(TOPIC, b"hello"))
        await trio.sleep(1.5)  # a new broker hears the producer's heartbeat within a second
        rows = await trio.to_thread.run_sync(
            broker.admin_json, "producerConnection", "-g", "PG_tbx_online", "-t", TOPIC
        )
    assert len(rows) == 1 and rows[0]["#Language"] == "PYTHON" and "@" in rows[0]["#ClientId"]
    gone = await trio.to_thread.run_sync(
        lambda: broker.admin("producerConnection", "-g", "PG_nobody", "-t", TOPIC, check=False)
    )
    assert gone.returncode == 1 and "not online" in gone.stderr


def test_get_and_update_broker_config(broker):
    config = broker.admin_json("getBrokerConfig", "-b", broker.broker)[broker.broker]
    assert config["brokerPermission"] == "6" and config["brokerClusterName"] == "DefaultCluster"
    assert config["shortPollingTimeMills"] == "1000" and "mapedFileSizeConsumeQueue" in config
    assert config["broker.graceful_timeout"] == "10.0"  # no RocketMQ key: Trocket's name and form
    text = broker.admin("getBrokerConfig", "-c", "DefaultCluster").stdout
    assert f"============{broker.broker}============" in text and "brokerPermission" in text
    # A key read where it is used changes in place, is kept, and is registered at once.
    out = broker.admin("updateBrokerConfig", "-b", broker.broker, "-k", "brokerPermission", "-v", "4").stdout
    assert out.strip() == f"update broker config success, {broker.broker}"
    assert broker.admin_json("getBrokerConfig", "-b", broker.broker)[broker.broker]["brokerPermission"] == "4"
    assert "brokerPermission=4" in (broker.data_dir / "config" / "runtime.properties").read_text()
    deadline = time.monotonic() + 10
    while broker.admin_json("topicRoute", "-t", TOPIC)["queueDatas"][0]["perm"] != 4:
        assert time.monotonic() < deadline, "the NameServer still routes writes here"
        time.sleep(0.2)
    assert trocket("produce", "-n", broker.namesrv, "-t", TOPIC, "-b", "refused").returncode != 0
    broker.admin("updateBrokerConfig", "-c", "DefaultCluster", "-k", "brokerPermission", "-v", "6")
    deadline = time.monotonic() + 10
    while trocket("produce", "-n", broker.namesrv, "-t", TOPIC, "-b", "accepted").returncode != 0:
        assert time.monotonic() < deadline, "writes still refused after brokerPermission=6"
        time.sleep(0.2)
    # A key taken at start is refused with the reason; so is a bad value; nothing changes.
    fixed = broker.admin(
        "updateBrokerConfig", "-b", broker.broker, "-k", "listenPort", "-v", "1", check=False
    )
    assert fixed.returncode == 1 and "NO_PERMISSION" in fixed.stderr
    assert "cannot change while the broker runs" in fixed.stderr and "brokerPermission" in fixed.stderr
    bad = broker.admin(
        "updateBrokerConfig", "-b", broker.broker, "-k", "brokerPermission", "-v", "9", check=False
    )
    assert bad.returncode == 1 and "INVALID_PARAMETER" in bad.stderr
    assert broker.admin_json("getBrokerConfig", "-b", broker.broker)[broker.broker]["brokerPermission"] == "6"


def test_get_and_update_namesrv_config(broker):
    [config] = broker.admin_json("getNamesrvConfig").values()
    assert config["namesrv.broker_expiry"] == "120.0"
    out = broker.admin("updateNamesrvConfig", "-k", "namesrv.broker_expiry", "-v", "90s").stdout
    assert "update name server config success!" in out
    [config] = broker.admin_json("getNamesrvConfig").values()
    assert config["namesrv.broker_expiry"] == "90.0"
    refused = broker.admin("updateNamesrvConfig", "-k", "namesrv.listen_port", "-v", "1", check=False)
    assert refused.returncode == 1 and "cannot change while the broker runs" in refused.stderr


def test_a_runtime_change_outlives_a_restart(tmp_path):
    first = start_broker(tmp_path)
    try:
        first.admin("updateBrokerConfig", "-b", first.broker, "-k", "slaveReadEnable", "-v", "true")
    finally:
        first.stop()
    namesrv_port = int(first.namesrv.rsplit(":", 1)[1])
    again = start_broker(tmp_path, namesrv_port=namesrv_port)
    try:
        assert (
            again.admin_json("getBrokerConfig", "-b", again.broker)[again.broker]["slaveReadEnable"] == "true"
        )
        assert "slaveReadEnable=true (changed at run time)" in again.log.read_text()
    finally:
        again.stop()


async def test_consumer_status_asks_each_running_consumer_for_its_state(broker):
    from contextlib import AsyncExitStack

    from trocket import ConsumeFromWhere, ConsumeStatus, PushConsumer

    consumers = []
    async with AsyncExitStack() as stack:
        for name in ("a", "b"):
            consumer = PushConsumer("CG_tbx_status", broker.namesrv, instance_name=f"status-{name}",
                                    consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
            consumer.subscribe(TOPIC, "*")
            consumer.register_listener(lambda messages, context: ConsumeStatus.CONSUME_SUCCESS)
            consumers.append(await stack.enter_async_context(consumer))
        with trio.fail_after(20):
            while sum(len(c.assigned_queues) for c in consumers) < 4 + 1:  # noqa: ASYNC110 - rebalance settles
                await trio.sleep(0.2)
        status = await trio.to_thread.run_sync(broker.admin_json, "consumerStatus", "-g", "CG_tbx_status")
        assert sorted(r["#ClientId"].split("@")[1] for r in status["rows"]) == ["status-a", "status-b"]
        assert sum(r["#Queues"] for r in status["rows"]) >= 4 and status["sameSubscription"] is True
        one = consumers[0].client_id
        info = await trio.to_thread.run_sync(
            broker.admin_json, "consumerStatus", "-g", "CG_tbx_status", "-i", one
        )
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert {s["topic"] for s in info["subscriptionSet"]} >= {TOPIC}
        owned = {(q.topic, q.queue_id) for q in consumers[0].assigned_queues}
        assert {(q["topic"], q["queueId"]) for q in info["mqTable"]} == owned
        text = await trio.to_thread.run_sync(
            lambda: broker.admin("consumerStatus", "-g", "CG_tbx_status").stdout
        )
        assert "Same subscription in the same group of consumer" in text
        gone = await trio.to_thread.run_sync(
            lambda: broker.admin("consumerStatus", "-g", "CG_tbx_status", "-i", "1.2.3.4@nobody", check=False)
        )
        assert gone.returncode == 1 and "not online" in gone.stderr


def test_stats_all_counts_sends_and_gets_per_topic_and_group(broker):
    topic = "ToolboxStats"
    broker.admin("updateTopic", "-b", broker.broker, "-t", topic, "-r", "2", "-w", "2")
    sent = trocket("produce", "-n", broker.namesrv, "-t", topic, "-b", "stat {i}", "-c", "6")
    assert sent.returncode == 0, sent.stderr
    group = "CG_tbx_stats_all"
    consumed = trocket(
        "consume", "-n", broker.namesrv, "-g", group, "-t", topic, "--from", "first", "-c", "6"
    )
    assert consumed.returncode == 0, consumed.stderr
    [row] = broker.admin_json("statsAll", "-t", topic)
    assert row["#Consumer Group"] == "CG_tbx_stats_all" and row["#InMsg24Hour"] == 6
    assert row["#OutMsg24Hour"] == 6 and row["#Accumulation"] == 0
    assert row["#InTPS"] == 0.1 and row["#OutTPS"] == 0.1  # 6 in the last minute
    lonely = "ToolboxStatsLonely"
    broker.admin("updateTopic", "-b", broker.broker, "-t", lonely, "-r", "1", "-w", "1")
    assert trocket("produce", "-n", broker.namesrv, "-t", lonely, "-b", "nobody reads").returncode == 0
    [row] = broker.admin_json("statsAll", "-t", lonely)
    assert row["#OutMsg24Hour"] == "NO_CONSUMER" and row["#InMsg24Hour"] == 1
    everything = broker.admin("statsAll", "-a").stdout
    assert topic in everything and "#Accumulation" in everything
