"""Replication cost and safety, measured in one run (issue 16).

A NameServer, a master and (except for the baseline) a slave run as separate processes on
loopback; this process drives them over TCP with RocketMQ send requests (128 B bodies):

1. puts/s with no replication, ASYNC_MASTER and SYNC_MASTER, at 1 and 64 producers, with
   ratios against no replication (target: SYNC_MASTER at 64 >= 50 % of ASYNC_MASTER);
2. replication lag of ASYNC_MASTER under 64 producers: how long after the master held an
   offset the slave held it, p50/p99 (sampled every 5 ms);
3. catch-up of a fresh slave against a master holding ``--catch-up-mib`` of log, in MB/s,
   next to a raw loopback TCP copy of the same bytes into a file (target: >= 200 MB/s);
4. RPO of ASYNC_MASTER: acknowledged messages missing on the slave after each of ``--kills``
   SIGKILLs of the master under load.

    ./run bench ha [--seconds 3] [--catch-up-mib 256] [--kills 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio
from trocket_process import REPO, free_port

from wire import record
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

BODY = b"x" * 128
TOPIC = "BenchHa"


class Deployment:
    """NameServer + master (+ slave) processes under ``root``."""

    def __init__(self, root: Path, role: str | None, *, slave: bool) -> None:
        self.root = root
        self.processes: list[subprocess.Popen[bytes]] = []
        self.namesrv = f"127.0.0.1:{free_port()}"
        self._start(
            "namesrv",
            [
                "namesrv",
                "-c",
                str(self._write("namesrv", f"[namesrv]\nlisten_port = {self.namesrv.split(':')[1]}\n")),
            ],
        )
        self.master, self.master_ha = self._broker(
            "master", role or "ASYNC_MASTER", 0, replicated=role is not None
        )
        self.slave = ""
        if slave:
            self.add_slave("slave", 1)

    def _write(self, name: str, text: str) -> Path:
        path = self.root / f"{name}.toml"
        path.write_text(text)
        return path

    def _start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = self.root / f"{name}.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "trocket", *args], stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while b"ready (Ctrl-C" not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{name} did not start:\n{log.read_text()}")
            time.sleep(0.05)
        self.processes.append(process)
        return process

    def _broker(self, name: str, role: str, broker_id: int, *, replicated: bool = True) -> tuple[str, str]:
        port, ha_port = free_port(), free_port()
        replicator = 'replicator = "ha"\n' if replicated else ""
        text = (
            f'[broker]\nplugins = ["store_mmap", "flush_async", "remoting", "ha"]\n{replicator}'
            f'broker_role = "{role}"\nbroker_id = {broker_id}\ndata_dir = "{self.root / name}"\n'
            f'listen_port = {port}\nnamesrv_addr = ["{self.namesrv}"]\n'
            f'[store_mmap]\ncommit_log_file_size = "256MiB"\nmessage_index_enable = false\n'
            f"[ha]\nlisten_port = {ha_port}\n"
            f'[remoting]\nregister_period = "2s"\n'
        )
        self.__dict__.setdefault("broker_processes", {})[name] = self._start(
            name, ["broker", "-c", str(self._write(name, text))]
        )
        return f"127.0.0.1:{port}", f"127.0.0.1:{ha_port}"

    def add_slave(self, name: str, broker_id: int) -> str:
        self.slave, _ = self._broker(name, "SLAVE", broker_id)
        return self.slave

    def kill_master(self) -> None:
        self.__dict__["broker_processes"]["master"].send_signal(signal.SIGKILL)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


async def figures(client: RemotingClient, addr: str) -> dict[str, str]:
    response = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5)
    return dict(json.loads(response.body)["table"])


async def wait_slave_connected(client: RemotingClient, master: str) -> None:
    with trio.fail_after(30):
        while int((await figures(client, master)).get("haInSyncSlaves", "0")) < 1:  # noqa: ASYNC110
            await trio.sleep(0.05)


def send_request(queue: int, body: bytes) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE,
        {"producerGroup": "PG", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 8,
         "queueId": queue, "sysFlag": 0, "bornTimestamp": 0, "flag": 0, "properties": "",
         "reconsumeTimes": 0},
        body,
    )  # fmt: skip


async def drive(
    client: RemotingClient, addr: str, producers: int, seconds: float
) -> tuple[float, dict[bytes, int]]:
    """Puts/s over ``seconds``; acknowledged bodies → commit-log offset (until the broker dies)."""
    acked: dict[bytes, int] = {}
    deadline = trio.current_time() + seconds

    async def producer(p: int) -> None:
        i = 0
        while trio.current_time() < deadline:
            body = f"{p}-{i}-".encode() + BODY
            i += 1
            try:
                response = await client.invoke(addr, send_request(p % 8, body), 10)
            except Exception:  # noqa: BLE001 - the broker was killed: this producer is done
                return
            if response.code == ResponseCode.SUCCESS:
                acked[body] = record.parse_offset_msg_id(response.ext["msgId"])[1]

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for p in range(producers):
            nursery.start_soon(producer, p)
    return len(acked) / (time.perf_counter() - started), acked


async def throughput(seconds: float) -> dict[tuple[str, int], float]:
    rates: dict[tuple[str, int], float] = {}
    for mode in ("none", "ASYNC_MASTER", "SYNC_MASTER"):
        with tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp:
            deployment = Deployment(Path(tmp), None if mode == "none" else mode, slave=mode != "none")
            try:
                async with RemotingClient.open() as client:
                    if mode != "none":
                        await wait_slave_connected(client, deployment.master)
                    await drive(client, deployment.master, 8, 0.5)  # topic created, warmed up
                    for producers in (1, 64):
                        rate, _ = await drive(client, deployment.master, producers, seconds)
                        rates[(mode, producers)] = rate
                        print(f"  {mode:13} {producers:3} producers: {rate:9,.0f} msgs/s", flush=True)
            finally:
                deployment.stop()
    return rates


async def replication_lag(seconds: float) -> list[float]:
    """Seconds between the master holding an offset and the slave holding it."""
    with tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp:
        deployment = Deployment(Path(tmp), "ASYNC_MASTER", slave=True)
        try:
            async with RemotingClient.open() as client:
                await wait_slave_connected(client, deployment.master)
                master_seen: list[tuple[float, int]] = []
                lags: list[float] = []

                async def sample() -> None:
                    pending: list[tuple[float, int]] = []
                    while True:
                        now = time.perf_counter()
                        m = int((await figures(client, deployment.master))["commitLogMaxOffset"])
                        s = int((await figures(client, deployment.slave))["haReceivedEnd"])
                        pending.append((now, m))
                        master_seen.append((now, m))
                        later = time.perf_counter()
                        while pending and pending[0][1] <= s:
                            lags.append(max(0.0, later - pending.pop(0)[0]))
                        await trio.sleep(0.005)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(sample)
                    await drive(client, deployment.master, 64, seconds)
                    nursery.cancel_scope.cancel()
                return lags
        finally:
            deployment.stop()


def raw_loopback_copy(files: list[Path], target: Path) -> float:
    """MB/s of sending ``files`` over a loopback TCP connection into one file (the floor any
    replication over TCP pays)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    total = sum(f.stat().st_size for f in files)

    def receive() -> None:
        connection, _ = server.accept()
        with connection, target.open("wb") as out:
            while chunk := connection.recv(1 << 20):
                out.write(chunk)

    receiver = threading.Thread(target=receive)
    receiver.start()
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for path in files:
            with path.open("rb") as source:
                sock.sendfile(source)
    receiver.join()
    server.close()
    return total / (time.perf_counter() - started) / 1e6


async def catch_up(mib: int) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp:
        root = Path(tmp)
        deployment = Deployment(root, "ASYNC_MASTER", slave=False)
        try:
            async with RemotingClient.open() as client:
                body = b"y" * 1000
                target = mib << 20

                async def filler(p: int) -> None:
                    while int((await figures(client, deployment.master))["commitLogMaxOffset"]) < target:
                        for _ in range(200):
                            await client.invoke(deployment.master, send_request(p % 8, body), 10)

                async with trio.open_nursery() as nursery:
                    for p in range(16):
                        nursery.start_soon(filler, p)
                end = int((await figures(client, deployment.master))["commitLogMaxOffset"])
                slave = deployment.add_slave("fresh", 1)
                # Timed from the first byte the slave holds to the last (process start and the
                # NameServer round that names the master are not replication).
                started, first = time.perf_counter(), 0
                with trio.fail_after(600):
                    while (held := int((await figures(client, slave)).get("haReceivedEnd", "0"))) < end:
                        if not first and held:
                            started, first = time.perf_counter(), held
                        await trio.sleep(0.02)
                rate = (end - first) / (time.perf_counter() - started) / 1e6
            files = sorted((root / "master" / "commitlog").iterdir())
            raw = raw_loopback_copy(files, root / "copy.bin")
            return rate, raw, end
        finally:
            deployment.stop()


async def one_kill(seconds: float) -> tuple[int, int]:
    """ASYNC_MASTER under 64 producers, SIGKILLed after ``seconds``: (acknowledged, lost)."""
    with tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp:
        deployment = Deployment(Path(tmp), "ASYNC_MASTER", slave=True)
        try:
            async with RemotingClient.open() as client:
                await wait_slave_connected(client, deployment.master)
                acked: dict[bytes, int] = {}

                async def load() -> None:
                    _, got = await drive(client, deployment.master, 64, seconds * 10)
                    acked.update(got)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(load)
                    await trio.sleep(seconds)
                    deployment.kill_master()
                await trio.sleep(0.5)
                held = int((await figures(client, deployment.slave))["commitLogMaxOffset"])
                return len(acked), sum(1 for offset in acked.values() if offset >= held)
        finally:
            deployment.stop()


async def rpo(kills: int, seconds: float) -> list[tuple[int, int]]:
    results = []
    for kill in range(kills):
        acked, lost = await one_kill(seconds)
        results.append((acked, lost))
        print(f"  kill {kill + 1}: {acked:,} acknowledged, {lost} beyond the slave's end", flush=True)
    return results


def percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[q - 1] if len(samples) > 1 else (samples or [0.0])[0]


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")
    print("1. puts/s over TCP, 128 B bodies, async flush")
    rates = await throughput(args.seconds)
    for producers in (1, 64):
        base = rates[("none", producers)]
        print(
            f"  {producers:3} producers: ASYNC_MASTER {rates[('ASYNC_MASTER', producers)] / base:.2f}x, "
            f"SYNC_MASTER {rates[('SYNC_MASTER', producers)] / base:.2f}x of no replication"
        )
    ratio = rates[("SYNC_MASTER", 64)] / rates[("ASYNC_MASTER", 64)]
    print(f"  SYNC_MASTER / ASYNC_MASTER at 64 producers: {ratio:.2f} (target >= 0.50)")

    print("2. replication lag, ASYNC_MASTER, 64 producers")
    lags = await replication_lag(args.seconds)
    p50, p99 = percentile(lags, 50) * 1000, percentile(lags, 99) * 1000
    print(f"  {len(lags)} samples: p50 {p50:.2f} ms, p99 {p99:.2f} ms")

    print(f"3. catch-up of a fresh slave ({args.catch_up_mib} MiB of log)")
    rate, raw, end = await catch_up(args.catch_up_mib)
    print(f"  slave: {rate:,.0f} MB/s ({end / 1e6:,.0f} MB); raw loopback copy: {raw:,.0f} MB/s")
    print(f"  slave / raw copy: {rate / raw:.2f}")
    print(f"  target >= 200 MB/s: {'met' if rate >= 200 else 'missed'}")

    print(f"4. RPO of ASYNC_MASTER, {args.kills} SIGKILLs under 64 producers")
    results = await rpo(args.kills, 1.5)
    losses = [lost for _, lost in results]
    typical = statistics.mean(a for a, _ in results)
    mean = statistics.mean(losses)
    print(f"  lost per kill: mean {mean:.1f}, max {max(losses)} (of ~{typical:,.0f} acknowledged)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--catch-up-mib", type=int, default=256)
    parser.add_argument("--kills", type=int, default=10)
    trio.run(main, parser.parse_args())
