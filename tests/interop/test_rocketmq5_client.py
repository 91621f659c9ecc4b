"""The official RocketMQ 5 Python client (``rocketmq-python-client`` 5.1.2, in its own
virtualenv, as a subprocess) against ``trocket up`` serving gRPC: normal, FIFO, delayed and
transactional sends; simple and push consumers; redelivery, invisibility changes, the DLQ; and
4.x and 5.x clients on one topic."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.interop.conftest import REPO, RunningBroker, run_client, start_broker
from tests.network.conftest import free_port
from tests.support import start_logged

CLIENT_VENV = REPO / ".venv-rocketmq5"
DRIVER = Path(__file__).with_name("rocketmq5_driver.py")
PLUGINS = '["store_mmap", "flush_async", "remoting", "namesrv", "retry_dlq", "pop", "proxy", "transaction"]'


def client_python() -> Path:
    python = CLIENT_VENV / "bin" / "python"
    if not python.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{python} is missing: ./run tests installs rocketmq-python-client there")
        pytest.skip(
            "the official RocketMQ 5 client is not installed (./run tests installs it in .venv-rocketmq5)"
        )
    return python


def start_proxy_broker(tmp_path: Path, proxy: str = "", extra: str = "") -> tuple[RunningBroker, str]:
    port = free_port()
    broker = start_broker(
        tmp_path,
        f'roles = ["broker", "namesrv", "proxy"]\nplugins = {PLUGINS}\n{extra}',
        tables=(
            f'[proxy]\ngrpc_port = {port}\nmin_invisible_time = "1s"\n{proxy}\n'
            '[transaction]\ncheck_interval = "1s"\ntimeout = "1s"\n'
        ),
    )
    return broker, f"127.0.0.1:{port}"


def drive(endpoint: str, timeout: float = 90, **scenario: object) -> list[dict]:
    result = subprocess.run(
        [str(client_python()), str(DRIVER), endpoint, json.dumps(scenario)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")},
    )
    assert result.returncode == 0, f"driver failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    out = []
    for line in result.stdout.splitlines():
        if line.startswith("@RESULT@"):
            out.append(json.loads(line[len("@RESULT@") :]))
    assert out and out[-1]["event"] == "done", result.stdout[-3000:] + result.stderr[-3000:]
    return out


def events(results: list[dict], kind: str) -> list[dict]:
    return [r for r in results if r["event"] == kind]


@pytest.fixture
def proxy_broker(tmp_path):
    client_python()
    broker, endpoint = start_proxy_broker(tmp_path)
    try:
        yield broker, endpoint
    finally:
        broker.stop()


def test_producer_and_simple_consumer_round_trip(proxy_broker):
    broker, endpoint = proxy_broker
    broker.admin("updateTopic", "-b", broker.broker, "-t", "Orders")
    sent = events(drive(endpoint, kind="produce", topic="Orders", count=5, tag="TagA"), "sent")
    assert len(sent) == 5 and all(s["message_id"] for s in sent)
    results = drive(endpoint, kind="simple", topic="Orders", consumer_group="CG_round_trip", count=5)
    got = events(results, "received")
    assert sorted(r["body"] for r in got) == [f"m-{i}" for i in range(5)]
    assert {r["message_id"] for r in got} == {s["message_id"] for s in sent}
    first = next(r for r in got if r["body"] == "m-0")
    assert first["tag"] == "TagA" and first["keys"] == ["key-0"] and first["attempt"] == 1
    assert first["properties"]["origin"] == "rocketmq5" and first["topic"] == "Orders"
    again = drive(endpoint, kind="simple", topic="Orders", consumer_group="CG_round_trip", count=1, seconds=6)
    assert events(again, "received") == []
    figures = broker.figures()
    assert figures["popAcks"] == "5" and int(figures["proxyCalls_SendMessage"]) == 5


def test_unacked_and_nacked_messages_come_back_with_attempt_two(proxy_broker):
    broker, endpoint = proxy_broker
    broker.admin("updateTopic", "-b", broker.broker, "-t", "Jobs")
    drive(endpoint, kind="produce", topic="Jobs", count=2)
    results = drive(
        endpoint, kind="simple", topic="Jobs", consumer_group="CG_nack", count=2, nack_first=True, invisible=2
    )
    attempts = sorted((r["body"], r["attempt"]) for r in events(results, "received"))
    assert attempts == [("m-0", 1), ("m-0", 2), ("m-1", 1), ("m-1", 2)]
    drive(endpoint, kind="produce", topic="Jobs", count=1, prefix="slow")
    changed = drive(
        endpoint, kind="simple", topic="Jobs", consumer_group="CG_nack", count=1, change_to=1, invisible=30
    )
    assert [(r["body"], r["attempt"]) for r in events(changed, "received")] == [("slow-0", 1), ("slow-0", 2)]


def test_fifo_delay_and_transaction_messages(proxy_broker):
    broker, endpoint = proxy_broker
    for topic, kind in (("Fifo", "FIFO"), ("Later", "DELAY"), ("Paid", "TRANSACTION")):
        broker.admin("updateTopic", "-b", broker.broker, "-t", topic, "-a", f"+message.type={kind}")
    drive(endpoint, kind="produce", topic="Fifo", count=6, group="order-7")
    fifo = events(drive(endpoint, kind="simple", topic="Fifo", consumer_group="CG_fifo", count=6), "received")
    assert [r["body"] for r in fifo] == [f"m-{i}" for i in range(6)]
    assert {r["group"] for r in fifo} == {"order-7"}
    refused = drive(endpoint, kind="produce", topic="Fifo", count=1)  # no message group: NORMAL
    assert events(refused, "send_failed") and not events(refused, "sent")

    drive(endpoint, kind="produce", topic="Later", count=2, delay_s=2)
    later = events(
        drive(endpoint, kind="simple", topic="Later", consumer_group="CG_later", count=2), "received"
    )
    assert sorted(r["body"] for r in later) == ["m-0", "m-1"]

    drive(endpoint, kind="produce", topic="Paid", count=1, transaction="commit", prefix="committed")
    drive(endpoint, kind="produce", topic="Paid", count=1, transaction="rollback", prefix="rolled")
    # left open: the broker's check-back reaches the producer's checker through Telemetry
    opened = drive(
        endpoint, kind="produce", topic="Paid", count=1, transaction="open", prefix="open", linger=8
    )
    assert [c["body"] for c in events(opened, "checked")] == ["open-0"]
    paid = events(drive(endpoint, kind="simple", topic="Paid", consumer_group="CG_paid", count=2), "received")
    assert sorted(r["body"] for r in paid) == ["committed-0", "open-0"]


def test_push_consumer_retries_then_succeeds(proxy_broker):
    broker, endpoint = proxy_broker
    broker.admin("updateTopic", "-b", broker.broker, "-t", "Pushed")
    drive(endpoint, kind="produce", topic="Pushed", count=2)
    results = drive(endpoint, kind="push", topic="Pushed", consumer_group="CG_push", failures=1, seconds=15)
    attempts = sorted((r["body"], r["attempt"]) for r in events(results, "received"))
    assert ("m-0", 1) in attempts and ("m-0", 2) in attempts and ("m-1", 2) in attempts


def test_4x_and_5x_clients_share_a_topic(proxy_broker):
    broker, endpoint = proxy_broker
    broker.admin("updateTopic", "-b", broker.broker, "-t", "Shared")
    run_client("produce", broker.namesrv, "Shared", "11")  # the official 4.x C++ client
    got = events(drive(endpoint, kind="simple", topic="Shared", consumer_group="CG_5x", count=11), "received")
    bodies = {r["body"] for r in got}
    assert {f"sync-{i}" for i in range(1, 10)} <= bodies and "x" * 5000 + "-0" in bodies  # zlib'd by 4.x
    drive(endpoint, kind="produce", topic="Shared", count=3, prefix="from5")
    seen = run_client("consume", broker.namesrv, "Shared", "CG_4x", "*", "20", "30")
    assert {f"from5-{i}" for i in range(3)} <= {r.get("body") for r in seen}


def test_standalone_proxy_in_front_of_a_broker(tmp_path):
    client_python()
    (tmp_path / "broker").mkdir()
    broker = start_broker(tmp_path / "broker")
    port = free_port()
    log = tmp_path / "proxy.log"
    proxy = start_logged("proxy", ["proxy", "-n", broker.namesrv, "--grpc-port", str(port)], log)
    try:
        assert f"grpc: 127.0.0.1:{port}" in log.read_text()
        broker.admin("updateTopic", "-b", broker.broker, "-t", "Alone")
        endpoint = f"127.0.0.1:{port}"
        sent = events(drive(endpoint, kind="produce", topic="Alone", count=3), "sent")
        consumed = drive(endpoint, kind="simple", topic="Alone", consumer_group="CG_alone", count=3)
        got = events(consumed, "received")
        assert {r["message_id"] for r in got} == {s["message_id"] for s in sent}
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)
        broker.stop()


def test_push_consumer_failing_every_time_ends_in_the_dead_letter_queue(proxy_broker):
    broker, endpoint = proxy_broker
    broker.admin("updateTopic", "-b", broker.broker, "-t", "Poison")
    broker.admin("updateSubGroup", "-b", broker.broker, "-g", "CG_poison", "-r", "1")
    drive(endpoint, kind="produce", topic="Poison", count=1, prefix="poison")
    results = drive(
        endpoint, kind="push", topic="Poison", consumer_group="CG_poison", failures=99, seconds=14
    )
    assert [r["attempt"] for r in events(results, "received")] == [1, 2]  # retryMaxTimes 1: one redelivery
    dead = broker.admin_json("queryDlqMsg", "-g", "CG_poison")
    assert [row["body"] for row in dead] == ["poison-0"]
    assert broker.figures()["popDeadLettered"] == "1"


def test_sigkill_between_receive_and_ack_redelivers_and_keeps_acks(tmp_path):
    client_python()
    broker, endpoint = start_proxy_broker(tmp_path)
    try:
        broker.admin("updateTopic", "-b", broker.broker, "-t", "Killed")
        drive(endpoint, kind="produce", topic="Killed", count=4)
        first = drive(
            endpoint, kind="simple", topic="Killed", consumer_group="CG_killed", count=4,
            ack_only=["m-0", "m-1"], invisible=3,
        )  # fmt: skip
        assert sorted(r["body"] for r in events(first, "acked")) == ["m-0", "m-1"]
        broker.process.kill()
        broker.process.wait(timeout=30)
        broker, endpoint = start_proxy_broker(tmp_path)
        again = drive(
            endpoint, kind="simple", topic="Killed", consumer_group="CG_killed", count=2, seconds=30
        )
        got = events(again, "received")
        assert sorted((r["body"], r["attempt"]) for r in got) == [("m-2", 2), ("m-3", 2)]
        after = drive(endpoint, kind="simple", topic="Killed", consumer_group="CG_killed", count=1, seconds=6)
        assert events(after, "received") == []  # the acked ones never come back
    finally:
        broker.stop()


def test_a_fifo_group_gets_a_message_groups_next_message_only_after_the_previous_is_acked(proxy_broker):
    broker, endpoint = proxy_broker
    broker.admin("updateTopic", "-b", broker.broker, "-t", "Strict", "-a", "+message.type=FIFO")
    broker.admin("updateSubGroup", "-b", broker.broker, "-g", "CG_strict", "-o", "true")
    drive(endpoint, kind="produce", topic="Strict", count=3, group="order-9")
    results = drive(
        endpoint, kind="simple", topic="Strict", consumer_group="CG_strict", count=3,
        nack_first=True, invisible=2, batch=1, seconds=40,
    )  # fmt: skip
    seen = [(r["body"], r["attempt"]) for r in events(results, "received")]
    # every first delivery is left unacked: the next message waits for its redelivery and ack
    assert seen == [("m-0", 1), ("m-0", 2), ("m-1", 1), ("m-1", 2), ("m-2", 1), ("m-2", 2)]
