"""The official RocketMQ C++ client (``rocketmq==0.4.4``) with ``set_session_credentials``
against ``trocket up`` with ACL on, and ``trocket admin`` with ``--authKey``/the environment,
as users run them: the right keys send and consume; a wrong secret, a key without PUB or SUB,
and a non-admin topic change are refused; nothing refused reaches the store."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.interop.conftest import RunningBroker, run_client, start_broker, subprocess_env
from trocket.cli.defaults import TROCKET_DEFAULTS

TOPIC = "AclTopic"
ACL = """
accounts:
  - accessKey: producer-key
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: ["AclTopic=PUB"]
  - accessKey: consumer-key
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["AclTopic=SUB"]
    groupPerms: ["CG_acl=SUB"]
  - accessKey: operator-key
    secretKey: operator-secret
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""
PRODUCER = ("producer-key", "producer-secret")
CONSUMER = ("consumer-key", "consumer-secret")
OPERATOR = {"TROCKET_ACCESS_KEY": "operator-key", "TROCKET_SECRET_KEY": "operator-secret"}


def acl_broker(tmp_path: Path) -> RunningBroker:
    (tmp_path / "plain_acl.yml").write_text(ACL)  # beside the config: where the broker looks
    plugins = "[" + ", ".join(f'"{name}"' for name in (*TROCKET_DEFAULTS.plugins, "acl")) + "]"
    return start_broker(tmp_path, f"plugins = {plugins}")


def stored_count(broker: RunningBroker) -> int:
    """Messages in the topic, as the operator's ``topicStatus`` shows them."""
    rows = json.loads(broker.admin("topicStatus", "-t", TOPIC, "--json", env=OPERATOR).stdout)
    return sum(row["#Max Offset"] - row["#Min Offset"] for row in rows)


def test_official_client_signs_and_the_broker_enforces_each_permission(tmp_path):
    broker = acl_broker(tmp_path)
    try:
        # Admin requests: a non-admin key is refused, the operator's key creates the topic.
        as_producer = ("--authKey", PRODUCER[0], "--authSecret", PRODUCER[1])
        refused = broker.admin("updateTopic", "-b", broker.broker, "-t", TOPIC, *as_producer, check=False)
        assert (
            refused.returncode == 1 and "NO_PERMISSION" in refused.stderr and "Need admin" in refused.stderr
        )
        kept = broker.admin("deleteTopic", "-c", "DefaultCluster", "-t", "TBW102", *as_producer, check=False)
        assert kept.returncode == 1 and "NO_PERMISSION" in kept.stderr, kept.stderr
        broker.admin("updateTopic", "-b", broker.broker, "-t", TOPIC, "-r", "4", "-w", "4", env=OPERATOR)
        deadline = time.monotonic() + 30  # the broker registers the new topic with the NameServer
        while broker.admin("topicRoute", "-t", TOPIC, check=False).returncode != 0:
            assert time.monotonic() < deadline, "the topic never reached the NameServer"
            time.sleep(0.1)

        # A wrong secret and a key without PUB cannot send; nothing they tried is stored.
        wrong = run_client("produce", broker.namesrv, TOPIC, "3", credentials=(PRODUCER[0], "not-the-secret"))
        assert [r["kind"] for r in wrong] == ["refused"], wrong
        # (the client reports its last retry's words; the broker's log says what it refused)
        assert "SEND_MESSAGE(10) from 127.0.0.1" in broker.log.read_text()
        assert "refused: Check signature failed for accessKey='producer-key'" in broker.log.read_text()
        no_pub = run_client("produce", broker.namesrv, TOPIC, "3", credentials=CONSUMER)
        assert [r["kind"] for r in no_pub] == ["refused"], no_pub
        assert "accessKey='consumer-key' needs PUB and has SUB" in broker.log.read_text()
        assert stored_count(broker) == 0

        # The right key sends (sync, oneway, orderly: the official client's three paths).
        sent = run_client("produce", broker.namesrv, TOPIC, "6", credentials=PRODUCER)
        syncs = [r for r in sent if r["kind"] == "sync"]
        assert len(syncs) == 6 and all(r["status"] == 0 for r in syncs), sent
        assert not [r for r in sent if r["kind"] == "refused"]
        expected = 6 + 1 + 4
        assert stored_count(broker) == expected

        # A key without SUB on the topic receives nothing; the consumer's key receives all.
        blind = run_client("consume", broker.namesrv, TOPIC, "CG_acl", "*", "1", "8", credentials=PRODUCER)
        assert not [r for r in blind if r["kind"] == "received"], blind
        got = run_client(
            "consume", broker.namesrv, TOPIC, "CG_acl", "*", str(expected), "60", credentials=CONSUMER
        )
        bodies = {r["body"] for r in got if r["kind"] == "received"}
        assert len(bodies) == expected and "oneway" in bodies, got

        # The operator edits the ACL with trocket admin; the edit is in the file and in force.
        broker.admin(
            "updateAclConfig", "-b", broker.broker, "-a", "producer-key", "-t", "AclTopic=SUB", env=OPERATOR
        )
        assert [
            r["kind"] for r in run_client("produce", broker.namesrv, TOPIC, "1", credentials=PRODUCER)
        ] == ["refused"]
        versions = broker.admin_json("clusterAclConfigVersion", "-c", "DefaultCluster", "--authKey",
                                     "operator-key", "--authSecret", "operator-secret")  # fmt: skip
        assert versions[0]["#AclConfigVersionNum"] == 1 and versions[0]["#Broker Addr"] == broker.broker
        accounts = yaml.safe_load((tmp_path / "plain_acl.yml").read_text())["accounts"]
        assert next(a for a in accounts if a["accessKey"] == "producer-key")["topicPerms"] == ["AclTopic=SUB"]
        assert stored_count(broker) == expected

        # trocket produce/consume sign with --authKey/--authSecret; without keys they are refused.
        auth = ("--authKey", "operator-key", "--authSecret", "operator-secret")
        cli = [sys.executable, "-m", "trocket"]
        sent = subprocess.run(
            [*cli, "produce", "-n", broker.namesrv, "-t", TOPIC, "-b", "cli-{i}", "-c", "3", *auth],
            capture_output=True, text=True, timeout=60, env=subprocess_env(),
        )  # fmt: skip
        assert sent.returncode == 0 and sent.stdout.count("SEND_OK") == 3, sent.stderr
        read = subprocess.run(
            [*cli, "consume", "-n", broker.namesrv, "-t", TOPIC, "-g", "CG_cli", "--from", "first", "-c",
             str(expected + 3), *auth],
            capture_output=True, text=True, timeout=120, env=subprocess_env(),
        )  # fmt: skip
        assert read.returncode == 0 and all(f"cli-{i}" in read.stdout for i in range(3)), read.stderr
        unsigned = subprocess.run(
            [*cli, "produce", "-n", broker.namesrv, "-t", TOPIC, "-b", "no", "-g", "PG_unsigned"],
            capture_output=True, text=True, timeout=60, env=subprocess_env(),
        )  # fmt: skip
        assert unsigned.returncode != 0 and "NO_PERMISSION" in unsigned.stderr, unsigned.stderr
    finally:
        broker.stop()
