"""What a queue costs: N topics x Q queues on one `trocket up` (RocketMQ's file sizes), one
message per queue, then steady pipelined produce and pull spread over every queue, next to the
same workload on 8 queues, in the same run.

It prints: topic creation rate, disk used (real and apparent, per store directory), open files,
broker RSS, the topic table's size (what a NameServer registration carries) and how long the
NameServer takes to route the last topic created, restart time after a clean stop and after
kill -9, and produce / pull throughput spread over all queues against 8 queues.

    ./run bench scale [--topics 1000] [--queues-per-topic 8] [--seconds 5] [--in-flight 64]
                      [--embedded-sizes] [--pooled-queue-entries N] [--max-open-queue-files N]

``--embedded-sizes`` runs with the file sizes of ``trocket up`` without a config;
``--pooled-queue-entries 0`` gives every queue its own files from its first message (RocketMQ's
layout, the figures before the pool).

Issue 39's targets (100,000 queues: ``--topics 12500``): disk <= data + 128 MiB (less the commit
log's up-front file), open files <= 2,000, RSS <= 1 GiB, restart after kill -9 <= 10 s, topic
creation >= 1,000/s, spread produce >= 0.8x the 8-queue figure.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.trocket_process import free_port  # noqa: E402
from trocket import Message, Producer  # noqa: E402
from trocket.admin import AdminClient  # noqa: E402
from trocket.cli.assembly import EMBEDDED_TABLES  # noqa: E402
from trocket.client.consumer.pulling import pull  # noqa: E402
from wire.message import MessageQueue  # noqa: E402
from wire.remoting import RemotingClient, RequestCode  # noqa: E402
from wire.subscription import Subscription  # noqa: E402

BODY = b"x" * 128
GROUP = "CG_scale"


class Broker:
    """A `trocket up -c` process that can be stopped, killed and started again in place."""

    def __init__(self, root: Path, store_keys: str = "") -> None:
        self.root = root
        self.namesrv = f"127.0.0.1:{free_port()}"
        self.address = f"127.0.0.1:{free_port()}"
        self.config = root / "trocket.toml"
        self.config.write_text(
            f'[broker]\ndata_dir = "{root / "data"}"\nlisten_port = {self.address.rsplit(":", 1)[1]}\n'
            f'namesrv_addr = ["{self.namesrv}"]\n[namesrv]\nlisten_port = {self.namesrv.rsplit(":", 1)[1]}\n'
            f"[store_mmap]\n{store_keys}\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Seconds until the broker says ready."""
        log = self.root / "broker.log"
        log.touch()
        began = time.monotonic()
        with log.open("a") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "trocket", "up", "-c", str(self.config)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)},
            )  # fmt: skip
        readies = log.read_text().count("ready (Ctrl-C")
        while log.read_text().count("ready (Ctrl-C") <= readies:
            if self.process.poll() is not None or time.monotonic() - began > 600:
                raise SystemExit("trocket up did not start:\n" + log.read_text()[-3000:])
            time.sleep(0.02)
        return time.monotonic() - began

    def stop(self, sig: int = signal.SIGTERM) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.process.wait(timeout=600)

    def open_files(self) -> int:
        assert self.process is not None
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def rss_mib(self) -> float:
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        return kib / 1024


def disk(path: Path) -> tuple[float, float]:
    """(real MiB, apparent MiB) of the files under ``path``."""
    files = [p for p in path.rglob("*") if p.is_file()]
    return (
        sum(p.stat().st_blocks * 512 for p in files) / 2**20,
        sum(p.stat().st_size for p in files) / 2**20,
    )


async def create_topics(admin: AdminClient, broker: str, topics: list[str], queues: int) -> float:
    """Topics per second, created with ``updateTopicList`` (UPDATE_AND_CREATE_TOPIC_LIST) in
    requests of 1,000."""
    began = time.monotonic()
    for start in range(0, len(topics), 1000):
        configs = [
            {"topicName": t, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6}
            for t in topics[start : start + 1000]
        ]
        await admin.update_topics(broker, configs)
    return len(topics) / (time.monotonic() - began)


async def create_topics_one_by_one(admin: AdminClient, broker: str, topics: list[str], queues: int) -> float:
    """Topics per second, one UPDATE_AND_CREATE_TOPIC each, 16 in flight."""
    began = time.monotonic()
    todo = iter(topics)

    async def worker() -> None:
        for topic in todo:
            await admin.update_topic(broker, topic, read=queues, write=queues, perm=6, order=False)

    async with trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(worker)
    return len(topics) / (time.monotonic() - began)


async def routed_after(admin: AdminClient, topic: str, limit: float = 120) -> float:
    """Seconds until the NameServer routes ``topic`` (a registration carried it)."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        try:
            await admin.route(topic)
            return time.monotonic() - began
        except Exception:  # noqa: BLE001 - not routed yet
            await trio.sleep(0.05)
    return float("inf")


async def produce(producer: Producer, queues: list[MessageQueue], seconds: float, in_flight: int) -> float:
    """Messages per second, ``in_flight`` sends at once, round-robin over ``queues``."""
    sent = 0
    deadline = time.monotonic() + seconds
    cursor = iter(range(1 << 62))

    async def worker() -> None:
        nonlocal sent
        while time.monotonic() < deadline:
            queue = queues[next(cursor) % len(queues)]
            await producer.send(Message(queue.topic, BODY), queue=queue)
            sent += 1

    began = time.monotonic()
    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(worker)
    return sent / (time.monotonic() - began)


async def pull_all(address: str, queues: list[MessageQueue], in_flight: int) -> tuple[float, int]:
    """(messages per second, messages) pulling every queue from offset 0 once, round-robin."""
    got = 0
    todo = iter(queues)
    async with RemotingClient.open() as remoting:

        async def worker() -> None:
            nonlocal got
            for queue in todo:
                result = await pull(
                    remoting, address, GROUP, queue, 0, Subscription.parse(queue.topic, "*"),
                    max_nums=32, suspend_ms=0,
                )  # fmt: skip
                got += len(result.messages)

        began = time.monotonic()
        async with trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(worker)
    return got / (time.monotonic() - began), got


async def main_async(args: argparse.Namespace, broker: Broker) -> dict[str, float]:
    figures: dict[str, float] = {}
    topics = [f"Scale{t:06d}" for t in range(args.topics)]
    async with AdminClient.open([broker.namesrv]) as admin:
        (name, address), *_ = (await admin.master_addrs()).items()
        print(f"creating {len(topics)} topics x {args.queues_per_topic} queues ...", flush=True)
        figures["topics_per_s"] = await create_topics(admin, address, topics, args.queues_per_topic)
        singles = [f"Single{t:04d}" for t in range(200)]
        figures["single_topics_per_s"] = await create_topics_one_by_one(admin, address, singles, 1)
        figures["route_s"] = await routed_after(admin, topics[-1])
        table = await admin.call(address, RequestCode.GET_ALL_TOPIC_CONFIG)
        figures["topic_table_kib"] = len(table.body) / 1024
        await admin.update_topic(address, "Eight", read=8, write=8, perm=6, order=False)
    every = [MessageQueue(t, name, q) for t in topics for q in range(args.queues_per_topic)]
    eight = [MessageQueue("Eight", name, q) for q in range(8)]
    async with Producer("PG_scale", broker.namesrv, busy_poll=0) as producer:
        print(f"one message per queue ({len(every)}) ...", flush=True)
        began = time.monotonic()
        async with trio.open_nursery() as nursery:
            chunks = [every[i :: args.in_flight] for i in range(args.in_flight)]
            for chunk in chunks:

                async def send_each(part: list[MessageQueue] = chunk) -> None:
                    for queue in part:
                        await producer.send(Message(queue.topic, BODY), queue=queue)

                nursery.start_soon(send_each)
        figures["first_message_per_s"] = len(every) / (time.monotonic() - began)
        print("steady produce, spread and on 8 queues ...", flush=True)
        figures["produce_spread"] = await produce(producer, every, args.seconds, args.in_flight)
        figures["produce_eight"] = await produce(producer, eight, args.seconds, args.in_flight)
    print("pull, spread and on 8 queues ...", flush=True)
    figures["pull_spread"], _ = await pull_all(broker.address, every, args.in_flight)
    eight_rate, _ = await pull_all(broker.address, eight * max(1, len(every) // 8 // 50), args.in_flight)
    figures["pull_eight"] = eight_rate
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--queues-per-topic", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument(
        "--max-open-queue-files",
        type=int,
        default=0,
        help="[store_mmap] max_open_queue_files (0: the default)",
    )
    parser.add_argument(
        "--embedded-sizes",
        action="store_true",
        help="the file sizes of `trocket up` without a config (64 MiB log files, 30,000-entry queue "
        "files, a 8 MiB index) instead of RocketMQ's",
    )
    parser.add_argument(
        "--pooled-queue-entries",
        type=int,
        default=None,
        help="[store_mmap] pooled_queue_entries (default: the store's, 204; 0: every queue in its own files)",
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="trocket-scale-", dir=os.environ.get("TROCKET_BENCH_DIR")))
    keys = f"max_open_queue_files = {args.max_open_queue_files}\n" if args.max_open_queue_files else ""
    if args.pooled_queue_entries is not None:
        keys += f"pooled_queue_entries = {args.pooled_queue_entries}\n"
    if args.embedded_sizes:
        keys += "".join(f"{key} = {value!r}\n" for key, value in EMBEDDED_TABLES["store_mmap"].items())
    broker = Broker(root, keys)
    broker.start()
    try:
        figures = trio.run(main_async, args, broker)
        figures["open_files"] = broker.open_files()
        figures["rss_mib"] = broker.rss_mib()
    finally:
        broker.stop()
    data = root / "data"
    parts = ("commitlog", "consumequeue", "consumequeue_pool", "index", "config")
    usage = {part: disk(data / part) for part in parts}
    figures["restart_clean_s"] = broker.start()
    broker.stop(signal.SIGKILL)
    figures["restart_kill9_s"] = broker.start()
    broker.stop()

    queues = args.topics * args.queues_per_topic
    sizes = "the embedded default's file sizes" if args.embedded_sizes else "RocketMQ's file sizes"
    print(f"\n{args.topics} topics x {args.queues_per_topic} queues = {queues} queues, 128 B bodies, {sizes}")
    print(
        f"topic creation        {figures['topics_per_s']:10.0f} topics/s in lists of 1,000 (target >= 1000)"
    )
    print(f"{'':22}{figures['single_topics_per_s']:10.0f} topics/s one by one, 16 in flight (200 more)")
    print(f"routed by NameServer  {figures['route_s']:10.2f} s after the last creation")
    print(f"topic table           {figures['topic_table_kib']:10.0f} KiB (a registration's body)")
    print(f"first message/queue   {figures['first_message_per_s']:10.0f} msgs/s")
    for part, (real, apparent) in usage.items():
        print(f"disk {part:<16} {real:10.1f} MiB real, {apparent:10.1f} MiB apparent")
    queue_mib = usage["consumequeue"][0] + usage["consumequeue_pool"][0]
    print(
        f"consume queues        {queue_mib:10.1f} MiB real (files and pool), "
        f"{queue_mib * 1024 * 1024 / queues:.0f} bytes per queue (target: data + 128 MiB)"
    )
    print(f"open files            {figures['open_files']:10.0f} (target <= 2000)")
    print(f"broker RSS            {figures['rss_mib']:10.0f} MiB (target <= 1024)")
    print(f"restart, clean stop   {figures['restart_clean_s']:10.2f} s")
    print(f"restart, kill -9      {figures['restart_kill9_s']:10.2f} s (target <= 10)")
    ratio = figures["produce_spread"] / figures["produce_eight"]
    print(
        f"produce               {figures['produce_spread']:10.0f} msgs/s spread, "
        f"{figures['produce_eight']:.0f} on 8 queues: {ratio:.2f}x (target >= 0.8)"
    )
    print(
        f"pull (32 per request) {figures['pull_spread']:10.0f} msgs/s spread (one message per queue), "
        f"{figures['pull_eight']:.0f} on 8 queues (full batches)"
    )
    print(f"\ndata left in {root}")


if __name__ == "__main__":
    main()
