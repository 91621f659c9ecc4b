"""The load generator of :mod:`kernel.testing.power_cut`: a real broker appending under load.

Run as ``python -m kernel.testing.power_cut_writer SPEC_JSON``. The spec holds the config
tables (as for :func:`kernel.testing.make_config`) and the load shape. Output, one line each,
flushed at once so the harness knows exactly what happened before it stopped the process:

- ``ready``
- ``ack <queue> <queue offset> <physical offset> <producer> <sequence> <unix ms>``: a put
  acknowledged with ``PUT_OK`` (its body is :func:`expected_body` of producer and sequence);
- ``flushed <offset>``: the store's flushed position reached ``offset``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import trio

from kernel import Broker, Message, MessageBatch
from kernel.model import PutStatus
from kernel.testing.helpers import make_config

TOPIC = "PowerCut"


def expected_body(producer: int, sequence: int) -> bytes:
    """Deterministic bodies of varying length, so any record served after a cut can be checked
    byte for byte, not only by its CRC."""
    return f"p{producer}-{sequence}-".encode().ljust(60 + (sequence * 37) % 400, b"z")


def parse_body(body: bytes) -> tuple[int, int] | None:
    """(producer, sequence) of a body made by :func:`expected_body`, or None."""
    try:
        producer, sequence, _ = body.split(b"-", 2)
        key = int(producer[1:]), int(sequence)
    except ValueError:
        return None
    return key if body == expected_body(*key) else None


async def _produce(broker: Broker, spec: dict[str, Any], producer: int, out: Any) -> None:
    queues = int(spec.get("queues", 4))
    rate = float(spec.get("rate", 0))
    max_bytes = int(spec.get("max_bytes", 1 << 62))
    queue_id = producer % queues
    sequence = 0
    while broker.store.watermarks().wrote < max_bytes:
        message = Message(TOPIC, expected_body(producer, sequence), queue_id=queue_id)
        result = await broker.put(MessageBatch([message]))
        if result.status is PutStatus.PUT_OK:
            append = result.append
            assert append is not None
            out.write(
                f"ack {queue_id} {append.queue_offsets[0]} {append.physical_offsets[0]} "
                f"{producer} {sequence} {int(time.time() * 1000)}\n"
            )
            out.flush()
        sequence += 1
        if rate:
            await trio.sleep(1 / rate)
    await trio.sleep_forever()


async def _report_flushed(broker: Broker, out: Any) -> None:
    flushed = broker.store.positions.flushed
    while True:
        await flushed.wait_reached(flushed.value + 1)
        out.write(f"flushed {flushed.value}\n")
        out.flush()


async def main(spec: dict[str, Any]) -> None:
    broker = Broker.assemble(make_config(**spec["tables"]))
    out = sys.stdout
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        out.write("ready\n")
        out.flush()
        nursery.start_soon(_report_flushed, broker, out)
        for producer in range(int(spec.get("producers", 8))):
            nursery.start_soon(_produce, broker, spec, producer, out)


if __name__ == "__main__":
    trio.run(main, json.loads(sys.argv[1]))
