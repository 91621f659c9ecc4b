"""Idle metrics connections and exhausted file descriptors (issue 40, item 3b): the exporter once
spent a thread and a descriptor on every idle connection forever, and when descriptors ran out a
timer's progress persist ended the whole process. Against a `trocket up` process."""

from __future__ import annotations

import os
import resource
import socket
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import trio

from plugins.metrics.http import IDLE_TIMEOUT
from tests.interop.conftest import start_broker
from tests.network.wire import send_request
from trocket.cli.defaults import TROCKET_DEFAULTS
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

PLUGINS = "plugins = [" + ", ".join(f'"{n}"' for n in (*TROCKET_DEFAULTS.plugins, "metrics")) + "]"
IDLE_CONNECTIONS = 300
FAST_PERSISTS = """
[remoting]
offset_persist_interval = "300ms"
[retry_dlq]
progress_persist_interval = "300ms"
"""


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Threads:")).split()[1])


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_metrics_connections_are_closed_and_cost_no_thread(tmp_path):
    broker = start_broker(tmp_path, PLUGINS, tables="[metrics]\nprom_exporter_port = 0\n")
    try:
        url = broker.figures()["metricsUrl"]
        address = urlsplit(url)
        pid = broker.process.pid
        threads, files = _threads(pid), _open_files(pid)
        idle = []
        try:
            for _ in range(IDLE_CONNECTIONS):
                sock = socket.create_connection((address.hostname, address.port), timeout=5)
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
                idle.append(sock)
            time.sleep(0.5)
            assert _threads(pid) < threads + 20, "a thread per idle connection"
            with urllib.request.urlopen(url, timeout=10) as response:  # scrapes still served
                assert b"rocketmq_rpc_latency" in response.read()
            started = time.monotonic()
            for sock in idle:
                sock.settimeout(max(0.1, IDLE_TIMEOUT * 3 - (time.monotonic() - started)))
                assert _closed_by_peer(sock), "an idle connection was never closed"
        finally:
            for sock in idle:
                sock.close()
        time.sleep(0.5)
        assert _open_files(pid) < files + 20
        assert broker.process.poll() is None
    finally:
        broker.stop()


async def test_background_persists_that_cannot_open_a_file_are_retried_not_fatal(tmp_path):
    """The broker's soft file limit is lowered to what it holds, so every periodic persist
    (offsets, delay and timer progress, transactions, views) fails with EMFILE for a while."""
    broker = start_broker(
        tmp_path,
        tables=FAST_PERSISTS,
    )
    try:
        pid = broker.process.pid
        async with RemotingClient.open() as client:
            sent = await client.invoke(broker.broker, send_request("Kept", b"x"), 10)
            assert sent.code == ResponseCode.SUCCESS
            limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            commit = RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "CG_kept", "topic": "Kept", "queueId": 0, "commitOffset": 1},
            )
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (_open_files(pid), limits[1]))
            try:
                assert (await client.invoke(broker.broker, commit, 10)).code == ResponseCode.SUCCESS
                deadline = time.monotonic() + 20
                while "will retry (brokerStatus backgroundWriteFailures)" not in broker.log.read_text():
                    assert time.monotonic() < deadline, broker.log.read_text()[-3000:]
                    assert broker.process.poll() is None, broker.log.read_text()[-3000:]
                    await trio.sleep(0.1)
                await trio.sleep(1)  # several more rounds of failing persists
                assert broker.process.poll() is None, broker.log.read_text()[-3000:]
            finally:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
            deadline = time.monotonic() + 20
            while "written again after" not in broker.log.read_text():
                assert time.monotonic() < deadline, broker.log.read_text()[-3000:]
                await trio.sleep(0.1)
            again = await client.invoke(broker.broker, send_request("Kept", b"y"), 10)
            assert again.code == ResponseCode.SUCCESS
        figures = broker.figures()
        assert int(figures["backgroundWriteFailures"]) > 0
        assert "Too many open files" in figures["backgroundWriteLastError"]
        assert "Traceback" not in broker.log.read_text()
    finally:
        broker.stop()
    offsets = (tmp_path / "data" / "config" / "consumerOffset.json").read_text()
    assert '"Kept@CG_kept"' in offsets  # written once descriptors were back


async def test_unknown_request_codes_add_no_series(tmp_path):
    """10,000 distinct unknown codes to the broker and the NameServer once took /metrics from
    37 KB to 45 MB; they now share one label set per server."""
    broker = start_broker(tmp_path, PLUGINS, tables="[metrics]\nprom_exporter_port = 0\n")
    try:
        url = broker.figures()["metricsUrl"]
        before = len(_scrape(url))
        async with RemotingClient.open() as client:
            for server in (broker.broker, broker.namesrv):
                for code in range(100_000, 102_000):
                    answer = await client.invoke(server, RemotingCommand.request(code), 10)
                    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        text = _scrape(url).decode()
        assert 'request_code="100000"' not in text
        assert text.count('request_code="-1",response_code="3"') >= 2  # one set per server
        assert len(text) < before + 20_000
    finally:
        broker.stop()
