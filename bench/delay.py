"""Scheduled delivery: how fast delayed messages become visible when many fall due at once, and
how late they are delivered, next to plain puts of the same messages in the same run.

A broker on store_mmap with the retry_dlq plugin, driven in-process:

1. baseline: N plain puts in batches of ``delivery_batch`` (256) to a normal topic;
2. timer burst: N messages with one ``TIMER_DELIVER_MS`` for all, parked before it; the rate is
   N / (time from that moment until the last is visible in its real topic);
3. delay-level backlog: N level-1 messages parked, the broker stopped before they are due and
   restarted after: the rate at which the restarted scheduler drains the backlog;
4. lateness under a steady trickle: timer messages due at random moments over a few seconds
   and level-1 messages put at a steady rate; p50/p99 of (store time - due time).

    ./run bench delay [--messages 100000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import trio

from kernel import Broker, Message, MessageBatch, pull
from kernel.model import GetStatus
from kernel.testing import make_config
from wire import record

BATCH = 256
QUEUES = 4
BODY = b"x" * 128


def broker_config(root: Path) -> object:
    return make_config(
        broker={
            "plugins": ["store_mmap", "flush_async", "retry_dlq"],
            "data_dir": str(root),
            "message_delay_level": "1s 5s",
        },
        store_mmap={"commit_log_file_size": "256MiB", "message_index_enable": False},
    )


def now_ms() -> int:
    return int(time.time() * 1000)


async def put_all(broker: Broker, topic: str, count: int, properties: dict[str, str]) -> float:
    """Put ``count`` messages in batches; return the seconds it took."""
    started = time.perf_counter()
    for start in range(0, count, BATCH):
        batch = [
            Message(topic, BODY, queue_id=i % QUEUES, properties=dict(properties))
            for i in range(start, min(start + BATCH, count))
        ]
        result = await broker.put(MessageBatch(batch))
        if not result.ok:
            raise RuntimeError(f"put failed: {result.status} {result.remark}")
    return time.perf_counter() - started


def visible(broker: Broker, topic: str) -> int:
    return sum(broker.store.max_queue_offset(topic, q) for q in range(QUEUES))


async def wait_visible(broker: Broker, topic: str, count: int) -> float:
    """Poll until ``count`` messages of ``topic`` are dispatched; return the wall-clock time."""
    while True:
        if visible(broker, topic) >= count:
            return time.time()
        await trio.sleep(0.001)


async def delivered(broker: Broker, topic: str) -> list[record.StoredMessage]:
    out = []
    for queue in range(QUEUES):
        offset = 0
        while True:
            got = await pull.get_messages(broker.store, topic, queue, offset, max_count=512)
            if got.status is not GetStatus.FOUND:
                break
            out += [record.decode_record(r) for r in got.records]
            offset = got.next_begin_offset
    return out


async def baseline_and_timer_burst(root: Path, count: int) -> tuple[float, float, float]:
    broker = Broker.assemble(broker_config(root))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        plain_seconds = await put_all(broker, "Plain", count, {})
        await broker.wait_dispatched()
        due_ms = now_ms() + int(plain_seconds * 1.5 * 1000) + 2000  # after parking is surely done
        park_seconds = await put_all(broker, "Burst", count, {"TIMER_DELIVER_MS": str(due_ms)})
        if now_ms() >= due_ms:
            raise RuntimeError("parking took longer than planned; the burst would not be 'at once'")
        done = await wait_visible(broker, "Burst", count)
        broker.request_stop("benchmark done")
    return count / plain_seconds, count / park_seconds, count / (done - due_ms / 1000)


async def level_backlog(root: Path, count: int) -> float:
    broker = Broker.assemble(broker_config(root))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await put_all(broker, "Backlog", count, {"DELAY": "2"})  # level 2: 5 s
        broker.request_stop("parked; restart later")
    broker = Broker.assemble(broker_config(root))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await trio.sleep(5.5)  # everything is due before the scheduler starts
        started = time.time()
        await nursery.start(broker.run)
        done = await wait_visible(broker, "Backlog", count)
        broker.request_stop("benchmark done")
    return count / (done - started)


async def lateness(root: Path, count: int, spread: float) -> tuple[list[float], list[float]]:
    """Milliseconds late for timer messages due over ``spread`` seconds and for level-1
    messages put steadily over the same time."""
    broker = Broker.assemble(broker_config(root))  # type: ignore[arg-type]
    rng = random.Random(1)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        start = now_ms() + 500
        timers = sorted(
            (start + int(rng.random() * spread * 1000) for _ in range(count)), key=lambda _: rng.random()
        )
        for first in range(0, count, BATCH):
            batch = [
                Message(
                    "Timed", str(due).encode(), queue_id=i % QUEUES, properties={"TIMER_DELIVER_MS": str(due)}
                )
                for i, due in enumerate(timers[first : first + BATCH])
            ]
            await broker.put(MessageBatch(batch))
        interval = spread / count
        for i in range(count):
            put_at = now_ms()
            message = Message(
                "Leveled", str(put_at + 1000).encode(), queue_id=i % QUEUES, properties={"DELAY": "1"}
            )
            await broker.put(MessageBatch([message]))
            await trio.sleep(interval)
        await wait_visible(broker, "Timed", count)
        await wait_visible(broker, "Leveled", count)
        timer_late = [m.store_timestamp - int(m.body) for m in await delivered(broker, "Timed")]
        level_late = [m.store_timestamp - int(m.body) for m in await delivered(broker, "Leveled")]
        broker.request_stop("benchmark done")
    return timer_late, level_late


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--trickle", type=int, default=2_000, help="messages per lateness run")
    parser.add_argument("--spread", type=float, default=4.0, help="seconds the trickle is due over")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        plain, parked, burst = trio.run(baseline_and_timer_burst, root / "burst", args.messages)
        backlog = trio.run(level_backlog, root / "backlog", args.messages)
        timer_late, level_late = trio.run(lateness, root / "late", args.trickle, args.spread)
    print(f"{args.messages:,} messages of {len(BODY)} B, batches of {BATCH}")
    print(f"baseline plain put:            {plain:>10,.0f} msgs/s")
    print(f"parking (timer) put:           {parked:>10,.0f} msgs/s   ratio {parked / plain:.2f}")
    print(f"timer burst made visible:      {burst:>10,.0f} msgs/s   ratio {burst / plain:.2f}")
    print(f"delay-level backlog drained:   {backlog:>10,.0f} msgs/s   ratio {backlog / plain:.2f}")
    for name, late in (("timer", timer_late), ("delay level 1", level_late)):
        print(
            f"lateness {name:>13} ({len(late):,} due over {args.spread:.0f} s): "
            f"p50 {percentile(late, 0.5):.0f} ms, p99 {percentile(late, 0.99):.0f} ms, "
            f"max {max(late):.0f} ms, early {sum(1 for x in late if x < 0)}"
        )


if __name__ == "__main__":
    main()
