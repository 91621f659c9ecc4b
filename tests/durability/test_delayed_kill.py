"""A broker killed with SIGKILL while 1,000 delayed messages are pending (500 by delay level, 500
by arbitrary time) delivers every one of them after a restart; duplicates are allowed (the
progress files are written every 10 s), losses are not."""

from __future__ import annotations

import signal
from collections import Counter

import trio

from tests.interop.conftest import RunningBroker, start_broker
from tests.network.wire import pulled_bodies, send_request
from wire.remoting import RemotingClient

TOPIC = "Delayed"
COUNT = 1000
QUEUES = 4
SETTINGS = 'message_delay_level = "1s 3s"'


async def _send_all(client: RemotingClient, broker: str) -> None:
    async def send(i: int) -> None:
        if i % 2:
            properties = {"DELAY": str(1 + i % 4 // 2)}  # levels 1 and 2: 1 s and 3 s
        else:
            properties = {"TIMER_DELAY_MS": str(300 + i * 5)}  # spread over 0.3 s .. 5.3 s
        request = send_request(TOPIC, f"m{i}".encode(), queue_id=i % QUEUES, properties=properties)
        response = await client.invoke(broker, request, 10)
        assert response.code == 0, (i, response.remark)

    for start in range(0, COUNT, 50):
        async with trio.open_nursery() as nursery:
            for i in range(start, min(start + 50, COUNT)):
                nursery.start_soon(send, i)


async def _delivered(client: RemotingClient, broker: str) -> Counter[bytes]:
    return await pulled_bodies(client, broker, TOPIC, QUEUES)


async def test_sigkill_with_1000_pending_delayed_messages_loses_none(tmp_path):
    broker = start_broker(tmp_path, SETTINGS)
    restarted: RunningBroker | None = None
    try:
        async with RemotingClient.open() as client:
            await client.invoke(broker.broker, send_request(TOPIC, b"create", queue_id=0), 10)
            await _send_all(client, broker.broker)
            await trio.sleep(1.5)  # some are delivered, most still wait
            before = await _delivered(client, broker.broker)
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(timeout=30)
        pending = COUNT - len(set(before) - {b"create"})
        assert 0 < pending < COUNT, f"the kill should find some delivered, some pending ({pending})"

        namesrv_port = int(broker.namesrv.rsplit(":", 1)[1])
        restarted = start_broker(tmp_path, SETTINGS, namesrv_port=namesrv_port)
        wanted = {f"m{i}".encode() for i in range(COUNT)}
        async with RemotingClient.open() as client:
            for _ in range(120):  # the last are due ~5 s after sending; allow a slow restart
                if wanted <= set(seen := await _delivered(client, restarted.broker)):
                    break
                await trio.sleep(0.5)
        missing = wanted - set(seen)
        assert not missing, f"{len(missing)} delayed messages lost: {sorted(missing)[:10]}"
        duplicates = sum(count - 1 for body, count in seen.items() if body in wanted)
        print(f"pending at the kill: {pending}; duplicates after restart: {duplicates}")
    finally:
        for running in (broker, restarted):
            if running is not None and running.process.poll() is None:
                running.process.send_signal(signal.SIGTERM)
                running.process.wait(timeout=60)
