"""Peers that break the HA protocol or go quiet cost one connection, never the broker; a slave
its master cannot serve gets a clear error in both logs and no data (issue 16)."""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from plugins.ha.wire import encode_report
from tests.network.conftest import free_port
from tests.network.wire import send_request
from tests.plugins.ha.processes import Process, ha_cluster
from tests.plugins.ha.test_replication import wait_caught_up, wait_connected
from wire.remoting import RemotingClient, ResponseCode


def _connect(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=15)
    sock.settimeout(15)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    started = time.monotonic()
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, TimeoutError):
        pass
    return time.monotonic() - started < seconds


async def _send_status(broker: Process, topic: str = "StillUp") -> int:
    async with RemotingClient.open() as client:
        response = await client.invoke(broker.addr, send_request(topic, b"x"), 10)
        return response.code


async def _sends_still_work(broker: Process) -> None:
    assert await _send_status(broker) == ResponseCode.SUCCESS


@contextmanager
def _paused(process: Process) -> Iterator[None]:
    """The process stopped (SIGSTOP): connected, in sync by its last report, silent."""
    process.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        process.process.send_signal(signal.SIGCONT)


async def test_a_bogus_report_never_acknowledges_a_sync_master_put(tmp_path):
    """docs/ha.md: every SEND_OK of a SYNC_MASTER is on a slave. A report of 2^40 from a
    stranger, refused or on an accepted connection, must not make the master answer SEND_OK
    while its one real slave is paused and holds nothing new."""
    with ha_cluster(tmp_path) as cluster:
        master = cluster.start_broker("master", "SYNC_MASTER", 0, ha='sync_timeout = "1s"')
        slave = cluster.start_broker("slave", "SLAVE", 1)
        wait_connected(cluster, master)
        assert await _send_status(master, "Held") == ResponseCode.SUCCESS
        wait_caught_up(cluster, master, slave)
        with _paused(slave):
            with _connect(master.ha_addr) as refused:  # a first report ahead of the log
                refused.sendall(encode_report(1 << 40))
                assert _closed_within(refused, 5)
            assert await _send_status(master, "Held") == ResponseCode.FLUSH_SLAVE_TIMEOUT
            with _connect(master.ha_addr) as accepted:  # accepted at 0, then a claim past what it was sent
                accepted.sendall(encode_report(0))
                accepted.recv(12)
                accepted.sendall(encode_report(1 << 40))
                assert _closed_within(accepted, 5)
            assert await _send_status(master, "Held") == ResponseCode.FLUSH_SLAVE_TIMEOUT
            assert int(cluster.figures(master)["haSlaveAckOffset"]) < 1 << 40
        assert "a report beyond what this connection carried acknowledges nothing" in master.text()
        wait_caught_up(cluster, master, slave)
        assert await _send_status(master, "Held") == ResponseCode.SUCCESS


async def test_malformed_reports_and_silent_slaves_close_one_connection(tmp_path):
    with ha_cluster(tmp_path) as cluster:
        master = cluster.start_broker("master", "ASYNC_MASTER", 0, ha='housekeeping_interval = "2s"')
        slave = cluster.start_broker("slave", "SLAVE", 1)
        wait_connected(cluster, master)
        with _connect(master.ha_addr) as bad:
            bad.sendall(struct.pack(">q", -42))
            assert _closed_within(bad, 5)
        with _connect(master.ha_addr) as silent:
            assert _closed_within(silent, 10)
        with _connect(master.ha_addr) as half:
            half.sendall(encode_report(0)[:5])  # half a report, then nothing
            assert _closed_within(half, 10)
        text = master.text()
        assert "malformed report: the slave reported a negative offset -42" in text
        assert "no report for 2s (haHousekeepingInterval)" in text
        await _sends_still_work(master)
        wait_caught_up(cluster, master, slave)  # the real slave was never disturbed


async def test_a_slave_fed_garbage_by_its_master_reconnects_and_keeps_serving(tmp_path):
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))
    with ha_cluster(tmp_path) as cluster:
        slave = cluster.start_broker("slave", "SLAVE", 1, ha=f'master_address = "127.0.0.1:{port}"')
        listener.settimeout(15)
        for _ in range(2):  # it comes back after each failure
            connection, _ = listener.accept()
            with connection:
                connection.recv(8)
                connection.sendall(struct.pack(">qi", 0, -7))
                await trio.sleep(0.3)
        listener.close()
        assert "malformed frame: not an HA frame: offset 0, length -7" in slave.text()
        figures = cluster.figures(slave)
        assert figures["brokerRole"] == "SLAVE" and figures["state"] == "running"


async def test_a_slave_ahead_of_its_master_gets_no_data_acknowledges_nothing_and_both_logs_say_why(tmp_path):
    with ha_cluster(tmp_path) as cluster:
        old = cluster.start_broker("old", "ASYNC_MASTER", 0)
        async with RemotingClient.open() as client:
            for i in range(50):
                await client.invoke(old.addr, send_request("Old", f"m{i}".encode()), 10)
        old.stop()
        cluster.processes.remove(old)
        master = cluster.start_broker("master", "SYNC_MASTER", 0, ha='sync_timeout = "1s"')
        config, addr, ha_addr, data_dir = cluster.broker_config("slave", "SLAVE", 1)
        assert old.data_dir is not None
        shutil.copytree(old.data_dir, data_dir)  # a slave holding another master's history
        slave = cluster.run_broker("slave", config, addr, ha_addr, data_dir)
        deadline = time.monotonic() + 20
        while "ahead of its master" not in slave.text() and time.monotonic() < deadline:  # noqa: ASYNC110
            await trio.sleep(0.1)  # polls the slave's log file
        assert "it is ahead of its master" in master.text() and "no data sent" in master.text()
        assert "this slave is ahead of its master; it keeps its data" in slave.text()
        assert int(cluster.figures(master)["commitLogMaxOffset"]) == 0
        assert int(cluster.figures(slave)["commitLogMaxOffset"]) > 0  # kept, not truncated
        # The refused slave's report (its longer log) acknowledges nothing: with the one real
        # slave paused, a put waits and times out instead of being answered SEND_OK.
        fresh = cluster.start_broker("fresh", "SLAVE", 2)
        wait_connected(cluster, master)
        assert await _send_status(master, "New") == ResponseCode.SUCCESS
        wait_caught_up(cluster, master, fresh)
        with _paused(fresh):
            assert await _send_status(master, "New") == ResponseCode.FLUSH_SLAVE_TIMEOUT
