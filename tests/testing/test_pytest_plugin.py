"""The ``trocket`` pytest plugin as its users run it: test files in a fresh directory, run by
pytest in a subprocess that finds the plugin through its ``pytest11`` entry point. A plain test
with the official 4.x client, trio tests with the SDK fixtures, a plugin under test chosen with
the marker, a crash and restart, a master with its slave. And ``free_port``, which the fixtures
use."""

from __future__ import annotations

import socket

import pytest

from trocket.testing.embedded import _ephemeral_low, free_port

pytest_plugins = ["pytester"]


def run(pytester: pytest.Pytester, source: str, **files: str) -> pytest.RunResult:
    pytester.makepyfile(test_it=source, **files)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")


def test_a_plain_test_sends_with_the_official_client(pytester: pytest.Pytester):
    result = run(
        pytester,
        """
        from rocketmq.client import Message, Producer

        def test_send(trocket_broker):
            producer = Producer("PG_official")
            producer.set_namesrv_addr(trocket_broker.namesrv_addr)
            producer.start()
            try:
                message = Message("Orders")
                message.set_keys("order-1")
                message.set_body("hello")
                assert producer.send_sync(message).status.name == "OK"
            finally:
                producer.shutdown()
        """,
    )
    result.assert_outcomes(passed=1)


def test_trio_tests_use_the_producer_and_consumer_fixtures(pytester: pytest.Pytester):
    result = run(
        pytester,
        """
        import pytest
        from trocket import Message

        @pytest.mark.trio
        async def test_round_trip(trocket_producer, trocket_consumer):
            for i in range(5):
                await trocket_producer.send(Message("Orders", f"order {i}".encode()))
            got = await trocket_consumer.receive("Orders", 5)
            assert sorted(m.body for m in got) == [f"order {i}".encode() for i in range(5)]
        """,
    )
    result.assert_outcomes(passed=1)


GUARD = """
from kernel import ConfigSection, MessageBatch, PutStatus, Rejection, hookimpl
import attrs

@attrs.frozen
class GuardConfig:
    deny: tuple[str, ...] = ()

@hookimpl
def trocket_config_sections():
    return [ConfigSection("acme_guard", GuardConfig)]

@hookimpl
def trocket_before_append(batch: MessageBatch, ctx):
    denied = ctx.plugin_config(GuardConfig).deny
    for message in batch.messages:
        if message.topic in denied:
            return Rejection(PutStatus.MESSAGE_ILLEGAL, f"topic {message.topic} is denied")
    return None
"""


def test_the_marker_loads_a_plugin_under_test_with_its_config(pytester: pytest.Pytester):
    result = run(
        pytester,
        """
        import pytest
        from trocket import Message, SendError

        pytestmark = pytest.mark.trocket(plugins=["acme_guard"], config={"acme_guard": {"deny": ["Secret"]}})

        @pytest.mark.trio
        async def test_denied(trocket_producer):
            assert (await trocket_producer.send(Message("Open", b"fine"))).status.name == "SEND_OK"
            with pytest.raises(SendError, match="topic Secret is denied"):
                await trocket_producer.send(Message("Secret", b"no"))

        def test_settings(trocket_settings):
            assert trocket_settings.plugins == ("acme_guard",)
        """,
        acme_guard=GUARD,
    )
    result.assert_outcomes(passed=2)


def test_a_crash_and_restart_recovers_what_was_acknowledged(pytester: pytest.Pytester):
    result = run(
        pytester,
        """
        import trio
        from trocket import Message, Producer
        from trocket.testing.pytest_plugin import TopicReader

        def test_crash(trocket_broker):
            async def send():
                async with Producer("PG_crash", trocket_broker.namesrv_addr) as producer:
                    for i in range(20):
                        await producer.send(Message("Durable", f"m{i}".encode()))

            trio.run(send)
            trocket_broker.restart(crash=True)
            assert not trocket_broker.running.broker.recovery.clean_shutdown
            reader = TopicReader(trocket_broker.namesrv_addr, "CG_after_crash")
            got = trio.run(reader.receive, "Durable", 20)
            assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(20))
            trocket_broker.restart()
            assert trocket_broker.running.broker.recovery.clean_shutdown
        """,
    )
    result.assert_outcomes(passed=1)


def test_a_cluster_answers_once_the_slave_holds_the_message(pytester: pytest.Pytester):
    result = run(
        pytester,
        """
        import trio
        from trocket import Message, Producer
        from trocket.admin import AdminClient

        def test_replicated(trocket_cluster):
            async def main():
                async with Producer("PG_ha", trocket_cluster.namesrv_addr) as producer:
                    with trio.fail_after(30):  # until the slave has connected
                        while True:
                            result = await producer.send(Message("Replicated", b"both"))
                            if result.status.name == "SEND_OK":
                                break
                            await trio.sleep(0.2)
                async with AdminClient.open([trocket_cluster.namesrv_addr]) as admin:
                    master = await admin.broker_runtime_info(trocket_cluster.master.broker_addr)
                    slave = await admin.broker_runtime_info(trocket_cluster.slave.broker_addr)
                assert int(slave["commitLogMaxOffset"]) == int(master["commitLogMaxOffset"]) > 0

            trio.run(main)
        """,
    )
    result.assert_outcomes(passed=1)


def test_free_ports_lie_below_the_ephemeral_range_and_bind_on_every_address():
    """An outgoing connection never takes such a port between the pick and a server's bind."""
    low = _ephemeral_low()
    ports = {free_port() for _ in range(20)}
    for port in ports:
        if low is not None:
            assert port < low
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", port))


def test_two_xdist_workers_never_hand_out_one_port(monkeypatch: pytest.MonkeyPatch):
    """A port is bound only when the server starts, seconds after the pick: another worker's
    pick in that gap must not be the same port (CI met it: a master's port taken), and one
    worker does not hand a port out twice before it has walked its whole slice."""
    if _ephemeral_low() is None:
        pytest.skip("no ephemeral range known here: ports come from the kernel")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    drawn: dict[str, list[int]] = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        drawn[worker] = [free_port() for _ in range(300)]
    assert len(set(drawn["gw0"])) == len(set(drawn["gw1"])) == 300
    assert not set(drawn["gw0"]) & set(drawn["gw1"])
