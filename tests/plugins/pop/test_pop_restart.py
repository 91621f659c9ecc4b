"""POP's in-flight state survives the broker: ``trocket up`` processes killed with SIGKILL or
stopped, then started again on the same data directory."""

from __future__ import annotations

import signal

import trio

from tests.interop.conftest import RunningBroker, start_broker
from tests.plugins.pop.wire import Popped, ack_request, change_request, pop_request, popped
from trocket import Message, Producer
from wire.remoting import RemotingClient, ResponseCode

GROUP = "CG_restart"


async def pop_all(client: RemotingClient, broker: RunningBroker, count: int, **options) -> list[Popped]:
    got: list[Popped] = []
    with trio.fail_after(30):
        while len(got) < count:
            response = await client.invoke(
                broker.broker, pop_request(GROUP, "Durable", poll_ms=1000, **options), 10
            )
            assert response.code in (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT), response.remark
            got += popped(response)
    return got


async def nothing_more(client: RemotingClient, broker: RunningBroker, seconds: float) -> None:
    response = await client.invoke(
        broker.broker, pop_request(GROUP, "Durable", poll_ms=int(seconds * 1000)), seconds + 10
    )
    assert response.code == ResponseCode.POLLING_TIMEOUT, [p.body for p in popped(response)]


async def test_sigkill_between_pop_and_ack_redelivers_and_forgets_nothing_acked(tmp_path):
    broker = start_broker(tmp_path)
    try:
        async with Producer("PG", broker.namesrv) as producer:
            for i in range(6):
                await producer.send(Message("Durable", f"m{i}".encode()))
        async with RemotingClient.open() as client:
            first = await pop_all(client, broker, 6, invisible_ms=4000)
            assert sorted(p.body for p in first) == [f"m{i}".encode() for i in range(6)]
            acked = [p for p in first if p.body in (b"m0", b"m3")]
            for item in acked:
                assert (await client.invoke(broker.broker, ack_request(GROUP, item), 10)).code == 0
            nacked = next(p for p in first if p.body == b"m5")
            changed = await client.invoke(broker.broker, change_request(GROUP, nacked, 600_000), 10)
            assert changed.code == ResponseCode.SUCCESS, changed.remark
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait(timeout=30)

        broker = start_broker(tmp_path, namesrv_port=int(broker.namesrv.rsplit(":", 1)[1]))
        async with RemotingClient.open() as client:
            again = await pop_all(client, broker, 3, invisible_ms=60_000)
            # delivered again: what was in flight; not again: the acked ones, and the one whose
            # invisible time was extended for ten minutes
            assert sorted(p.body for p in again) == [b"m1", b"m2", b"m4"]
            assert all(p.message.reconsume_times == 1 for p in again)
            await nothing_more(client, broker, 2)
            for item in again:
                assert (await client.invoke(broker.broker, ack_request(GROUP, item), 10)).code == 0
        broker.stop()  # a clean stop, then a start: the acks hold

        broker = start_broker(tmp_path, namesrv_port=int(broker.namesrv.rsplit(":", 1)[1]))
        async with RemotingClient.open() as client:
            await nothing_more(client, broker, 2)
        figures = broker.figures()
        assert figures["popLoaded"] == "true"
        assert figures["popMessagesInFlight"] == "1"  # m5, invisible for ten minutes
    finally:
        broker.stop()
