"""A small consumer application, run as a subprocess by the tests so it can be SIGKILLed.

    python consumer_app.py NAMESRV GROUP TOPIC OUTFILE [DELAY_MS]

Appends each consumed body to OUTFILE (one line each, flushed) and prints "started" once it
owns its queues.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from trocket import ConsumeFromWhere, ConsumeStatus, PushConsumer


async def main(namesrv: str, group: str, topic: str, outfile: Path, delay_ms: int) -> None:
    with outfile.open("a", buffering=1) as out:

        async def listener(messages, context):
            for message in messages:
                out.write(message.body.decode() + "\n")
            await trio.sleep(delay_ms / 1000)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = PushConsumer(group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                                consume_thread_max=4)  # fmt: skip
        consumer.subscribe(topic)
        consumer.register_listener(listener)
        async with consumer:
            print("started", flush=True)
            await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(
        main,
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        Path(sys.argv[4]),
        int(sys.argv[5]) if len(sys.argv) > 5 else 0,
    )
