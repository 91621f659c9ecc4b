"""acme_audit in a real broker: one line per stored message with the ids clients saw; after a
crash (in process, and a real ``kill -9`` of a broker process) and a restart every
acknowledged message is in the file exactly once, in log order; a log cut below the saved
progress cuts the file too."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from acme_audit import read_audit

from trocket import Message, Producer
from trocket.testing import BrokerSettings, BrokerThread

AUDITED = BrokerSettings(("acme_audit",), {"acme_audit": {"topics": ["orders", "refunds"]}})
pytestmark = pytest.mark.trocket(
    plugins=["acme_audit"], config={"acme_audit": {"topics": ["orders", "refunds"]}}
)


async def send(namesrv: str, topic: str, count: int, start: int = 0) -> list[str]:
    """Send ``count`` messages; the ids of those acknowledged."""
    async with Producer("PG_audit", namesrv) as producer:
        return [
            (await producer.send(Message(topic, f"{topic} {i}".encode()))).msg_id
            for i in range(start, start + count)
        ]


def test_every_stored_message_of_the_audited_topics_is_a_line(trocket_broker):
    orders = trio.run(send, trocket_broker.namesrv_addr, "orders", 5)
    trio.run(send, trocket_broker.namesrv_addr, "other", 3)
    refunds = trio.run(send, trocket_broker.namesrv_addr, "refunds", 2)
    trocket_broker.stop()
    lines = read_audit(trocket_broker.data_dir)
    assert [line.msg_id for line in lines] == orders + refunds
    assert [line.body_length for line in lines] == [len(f"orders {i}") for i in range(5)] + [9, 9]
    assert [line.offset for line in lines] == sorted(line.offset for line in lines)
    assert all(line.born_host.startswith("127.0.0.1:") for line in lines)
    trocket_broker.start()  # for the fixture's stop


def test_a_crash_and_restart_leave_each_message_once(trocket_broker):
    before = trio.run(send, trocket_broker.namesrv_addr, "orders", 20)
    trocket_broker.restart(crash=True)  # no final save: dispatch resumes at the saved progress
    after = trio.run(send, trocket_broker.namesrv_addr, "orders", 10, 20)
    trocket_broker.stop()
    assert [line.msg_id for line in read_audit(trocket_broker.data_dir)] == before + after
    trocket_broker.start()


def test_a_log_cut_below_the_saved_progress_cuts_the_file(tmp_path: Path):
    host = BrokerThread(tmp_path, AUDITED)
    host.start()
    kept = trio.run(send, host.namesrv_addr, "orders", 3)
    host.stop()
    # As if the broker had saved progress for records a power cut then took from the log.
    progress = tmp_path / "acme_audit" / "progress.json"
    with (tmp_path / "acme_audit" / "audit.log").open("a") as audit:
        audit.write("999999999 0 orders 0 99 LOST 1 127.0.0.1:1\n")
    progress.write_text(json.dumps({"offset": 10**9}))
    host.start()
    later = trio.run(send, host.namesrv_addr, "orders", 2, 3)
    host.stop()
    assert [line.msg_id for line in read_audit(tmp_path)] == kept + later
    assert json.loads(progress.read_text())["offset"] < 10**9


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_process(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """``trocket up`` with ``config``, once it says it is ready (its output appended to ``log``)."""
    ready = log.read_bytes().count(b"ready (Ctrl-C") if log.exists() else 0
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "trocket", "up", "-c", str(config)], stdout=out, stderr=out
        )
    deadline = time.monotonic() + 60
    while log.read_bytes().count(b"ready (Ctrl-C") == ready:
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return process


def test_a_broker_killed_with_sigkill_keeps_the_trail_exact(tmp_path: Path):
    namesrv, broker = free_port(), free_port()
    config = tmp_path / "broker.toml"
    config.write_text(
        f"""
[broker]
plugins = ["store_mmap", "flush_async", "remoting", "namesrv", "acme_audit"]
data_dir = "{tmp_path / "data"}"
listen_port = {broker}
namesrv_addr = ["127.0.0.1:{namesrv}"]

[store_mmap]
commit_log_file_size = "16MiB"

[namesrv]
listen_port = {namesrv}
"""
    )
    log = tmp_path / "broker.log"
    process = start_process(config, log)
    address = f"127.0.0.1:{namesrv}"
    try:
        first = trio.run(send, address, "orders", 30)
        time.sleep(1.5)  # a periodic save: the trail has progress, and more comes after it
        first += trio.run(send, address, "orders", 20, 30)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        process = start_process(config, log)
        second = trio.run(send, address, "orders", 10, 50)
        assert read_audit(tmp_path / "data"), "the trail saved before the kill is there"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert [line.msg_id for line in read_audit(tmp_path / "data")] == first + second
