"""The official RocketMQ C++ client (``rocketmq==0.4.4``) against ``trocket up``."""

from __future__ import annotations

import json
import signal

from tests.interop.conftest import RunningBroker, run_client, start_broker

TOPIC = "InteropTopic"
COUNT = 20

SHORT_DELAY_LEVELS = 'message_delay_level = "1s 1s 1s"'
"""Retries use level 3 + reconsume times, clamped: one second each."""


def test_official_producer_and_tag_filtered_push_consumer(running_broker: RunningBroker):
    sent = run_client("produce", running_broker.namesrv, TOPIC, str(COUNT))
    syncs = [r for r in sent if r["kind"] == "sync"]
    orderly = [r for r in sent if r["kind"] == "orderly"]
    assert len(syncs) == COUNT and all(r["status"] == 0 for r in syncs), syncs
    assert len(orderly) == 4 and all(r["status"] == 0 for r in orderly)
    assert [r["offset"] for r in orderly] == sorted(r["offset"] for r in orderly), "one queue, in order"

    tag_a = [r for r in syncs if r["tag"] == "TagA"]
    expected = len(tag_a) + 1 + len(orderly)  # sync TagA + oneway + orderly
    received = run_client("consume", running_broker.namesrv, TOPIC, "CG_interop", "TagA", str(expected), "60")
    bodies = [r["body"] for r in received if r["kind"] == "received"]
    assert all(r["tags"] == "TagA" for r in received), "the broker filtered by tag"
    assert len(bodies) == len(set(bodies)) == expected, f"exactly once in a clean run: {bodies}"
    assert "oneway" in bodies and {f"orderly-{i}" for i in range(4)} <= set(bodies)
    assert any(b.startswith("xxxx") and b.endswith("-0") for b in bodies), (
        "compressed bodies come back inflated"
    )
    by_body = {r["body"]: r for r in received}
    assert by_body["sync-2"]["keys"] == "key-2" and by_body["sync-2"]["id"] == syncs[2]["msg_id"]

    progress = [
        row
        for row in running_broker.admin_json("consumerProgress", "-g", "CG_interop")
        if row["#Topic"] == TOPIC
    ]
    assert sum(row["#Broker Offset"] for row in progress) == COUNT + 1 + len(orderly)
    assert all(0 < row["#Consumer Offset"] <= row["#Broker Offset"] for row in progress), progress

    by_key = running_broker.admin_json("queryMsgByKey", "-t", TOPIC, "-k", "key-4")
    assert [m["body"] for m in by_key] == ["sync-4"]
    by_unique = running_broker.admin_json("queryMsgByUniqueKey", "-t", TOPIC, "-i", syncs[6]["msg_id"])
    assert by_unique[0]["keys"] == ["key-6"] and by_unique[0]["uniqKey"] == syncs[6]["msg_id"]
    by_id = running_broker.admin_json("queryMsgById", "-i", by_unique[0]["offsetMsgId"])
    assert by_id[0]["body"] == "sync-6"


def test_admin_commands_against_a_running_broker(running_broker: RunningBroker):
    assert (
        "create topic to"
        in running_broker.admin(
            "updateTopic", "-c", "DefaultCluster", "-t", "AdminT", "-r", "2", "-w", "2"
        ).stdout
    )
    assert "AdminT" in running_broker.admin("topicList").stdout.split()
    route = running_broker.admin_json("topicRoute", "-t", "AdminT")
    assert route["queueDatas"][0]["writeQueueNums"] == 2
    status = running_broker.admin_json("topicStatus", "-t", "AdminT")
    assert [row["#QID"] for row in status] == [0, 1]
    clusters = running_broker.admin_json("clusterList")
    assert clusters[0]["#Addr"] == running_broker.broker and clusters[0]["#State"] == "running"
    table = running_broker.admin("brokerStatus", "-b", running_broker.broker).stdout
    assert "commitLogMaxOffset" in table
    running_broker.admin("updateSubGroup", "-b", running_broker.broker, "-g", "SubG", "-r", "5")
    groups = json.loads((running_broker.data_dir / "config" / "subscriptionGroup.json").read_text())
    assert groups["subscriptionGroupTable"]["SubG"]["retryMaxTimes"] == 5
    assert "OK" in running_broker.admin("wipeWritePerm", "-b", "broker-a").stdout
    assert running_broker.admin_json("topicRoute", "-t", "AdminT")["queueDatas"][0]["perm"] == 4
    running_broker.admin("addWritePerm", "-b", "broker-a")
    running_broker.admin("deleteTopic", "-c", "DefaultCluster", "-t", "AdminT")
    failed = running_broker.admin("topicRoute", "-t", "AdminT", check=False)
    assert failed.returncode == 1 and "has no route" in failed.stderr
    offline = running_broker.admin("consumerConnection", "-g", "Nobody", check=False)
    assert offline.returncode == 1 and "not online" in offline.stderr


def test_reconsume_later_comes_back_through_the_retry_topic(tmp_path):
    broker = start_broker(tmp_path, SHORT_DELAY_LEVELS)
    try:
        run_client("produce", broker.namesrv, "RetryTopic", "4")
        seen = run_client(
            "consume", broker.namesrv, "RetryTopic", "CG_retry", "*", "9", "60", "reconsume_first"
        )
        rejected = {r["body"] for r in seen if r["kind"] == "rejected"}
        redelivered = [r for r in seen if r["kind"] == "received"]
        assert rejected and rejected == {r["body"] for r in redelivered}, seen
        assert all(r["reconsume"] >= 1 and r["topic"] == "RetryTopic" for r in redelivered), redelivered
        retry = broker.admin_json("topicStatus", "-t", "%RETRY%CG_retry")
        # The 1.2 client sends back every message of a pulled batch after the first failure,
        # so the retry topic can hold more copies than there were rejections.
        assert sum(row["#Max Offset"] for row in retry) >= len(rejected)
    finally:
        broker.process.send_signal(signal.SIGTERM)
        broker.process.wait(timeout=60)


def test_always_failing_messages_end_in_the_dead_letter_queue(tmp_path):
    broker = start_broker(tmp_path, SHORT_DELAY_LEVELS)
    try:
        broker.admin("updateTopic", "-b", broker.broker, "-t", "DlqTopic", "-r", "1", "-w", "1")
        broker.admin("updateSubGroup", "-b", broker.broker, "-g", "CG_dlq", "-r", "2")
        run_client("produce", broker.namesrv, "DlqTopic", "1")  # 6 messages: sync, oneway, 4 orderly
        # The consumer fails everything for 15 s: three deliveries (retryMaxTimes 2) take ~4 s.
        consume = ("consume", broker.namesrv, "DlqTopic", "CG_dlq", "*", "999", "15", "always_fail")
        failures = run_client(*consume)
        # The 1.2 client also sends back the rest of a pulled batch when one message fails, so
        # the listener does not see every delivery; what it sees never exceeds the limit.
        assert failures and {f["reconsume"] for f in failures} <= {0, 1, 2}, failures
        assert any(f["reconsume"] == 2 for f in failures), "retries reached the listener"
        dead = broker.admin_json("queryDlqMsg", "-g", "CG_dlq")
        produced = {"x" * 5000 + "-0", "oneway", *(f"orderly-{i}" for i in range(4))}
        assert {m["body"] for m in dead} == produced
        assert all(m["reconsumeTimes"] == 3 and m["properties"]["RETRY_TOPIC"] == "DlqTopic" for m in dead)
    finally:
        broker.process.send_signal(signal.SIGTERM)
        broker.process.wait(timeout=60)
