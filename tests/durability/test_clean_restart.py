"""A clean stop records where dispatch stopped, so the next start re-dispatches nothing (issue 23:
every clean restart used to replay the whole log into the consume queues and the index)."""

from __future__ import annotations

import signal

import trio

from tests.interop.conftest import RunningBroker, start_broker
from tests.network.wire import pull_request, send_request
from wire import record
from wire.remoting import RemotingClient, ResponseCode

TOPIC = "Restarted"


def _stop(broker: RunningBroker) -> str:
    broker.process.send_signal(signal.SIGINT)
    broker.process.wait(timeout=60)
    assert broker.process.returncode == 0
    return broker.log.read_text()


async def _pull_all(client: RemotingClient, addr: str, queue_id: int) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        response = await client.invoke(addr, pull_request(TOPIC, queue_id, len(bodies), max_msgs=32), 10)
        if response.code != ResponseCode.SUCCESS:
            return bodies
        bodies += [m.body for m in record.decode_records(response.body)]


async def test_clean_restart_redispatches_nothing_and_serves_everything(tmp_path):
    broker = start_broker(tmp_path)
    try:
        async with RemotingClient.open() as client:
            for i in range(300):
                request = send_request(TOPIC, f"m{i}".encode(), queue_id=i % 2, keys=f"k{i}")
                assert (await client.invoke(broker.broker, request, 10)).code == ResponseCode.SUCCESS
            await trio.sleep(0.5)  # dispatch catches up before the stop (the stop drains it anyway)
    finally:
        first_log = _stop(broker)
    assert "stopped cleanly" in first_log

    (tmp_path / "broker.log").rename(tmp_path / "first.log")
    again = start_broker(tmp_path)
    try:
        output = again.log.read_text()
        assert "recovery: normal" in output
        assert "dispatch resumes" not in output, output
        assert "redispatch_from=0," not in output
        async with RemotingClient.open() as client:
            assert await _pull_all(client, again.broker, 0) == [f"m{i}".encode() for i in range(0, 300, 2)]
            assert await _pull_all(client, again.broker, 1) == [f"m{i}".encode() for i in range(1, 300, 2)]
            more = await client.invoke(again.broker, send_request(TOPIC, b"after", queue_id=0), 10)
            assert more.code == ResponseCode.SUCCESS and more.ext["queueOffset"] == "150"
        found = again.admin("queryMsgByKey", "-t", TOPIC, "-k", "k299").stdout
        assert "m299" in found
    finally:
        _stop(again)
