"""Producing test data for the Spark tests (through the SDK, like an application)."""

from __future__ import annotations

import time

import trio

from trocket import Message, Producer
from trocket.admin.client import AdminClient


def produce(
    namesrv: str,
    topic: str,
    count: int,
    *,
    prefix: str = "m",
    tags: str | None = None,
    batch: int = 64,
    queue_id: int | None = None,
) -> list[bytes]:
    """Send ``count`` messages ``{prefix}{i}`` with keys ``k{i}`` in batches; returns the bodies
    once the broker's consume queues hold them all.

    A send is acknowledged when the commit log has it; the consume queues that offset lookups
    read are filled just after (the dispatch lag RocketMQ has too), so without the wait a read
    planned at once could see part of the last batch.
    """
    bodies = [f"{prefix}{i}".encode() for i in range(count)]
    sent: dict[int, int] = {}

    async def main() -> None:
        async with Producer("PG_spark_tests", namesrv) as producer:
            queues = await producer.fetch_publish_message_queues(topic)
            for n, at in enumerate(range(0, count, batch)):
                chunk = [
                    Message(topic, b, tags=tags, keys=(f"k{at + i}",), properties={"n": str(at + i)})
                    for i, b in enumerate(bodies[at : at + batch])
                ]
                queue = queues[(n if queue_id is None else queue_id) % len(queues)]
                result = await producer.send_batch(chunk, queue=queue)
                sent[queue.queue_id] = result.queue_offset + len(chunk)
        with trio.fail_after(60):  # a broker that never dispatches fails the test, not hangs it
            await _until_visible(namesrv, topic, sent)

    trio.run(main)
    return bodies


async def _until_visible(namesrv: str, topic: str, sent: dict[int, int]) -> None:
    """Until each queue's max offset (what offset lookups see) reaches what was sent to it."""
    async with AdminClient.open([namesrv]) as admin:
        while True:
            visible = {row["queueId"]: row["maxOffset"] for row in await admin.topic_status(topic)}
            if all(visible.get(q, 0) >= end for q, end in sent.items()):
                return
            await trio.sleep(0.05)


def wait_until(condition, timeout: float = 60.0, what: str = "condition") -> None:
    """Poll ``condition`` every 0.2 s (for broker-side background work such as retention)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - not there yet
            pass
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {timeout} s")
