"""acme_guard in a real broker (the ``trocket`` pytest plugin's fixtures): denied topics are
refused with the pattern named, single and batch sends alike; others pass; a bad config stops
the broker with the key named."""

from __future__ import annotations

import pytest
from acme_guard import GUARD

from kernel.errors import ConfigError
from trocket import Message, SendError
from trocket.testing import BrokerSettings, BrokerThread

pytestmark = pytest.mark.trocket(
    plugins=["acme_guard"], config={"acme_guard": {"deny": ["secret-*", "payroll"]}}
)


async def test_denied_topics_are_refused_with_the_pattern_named(trocket_producer, trocket_broker):
    assert (await trocket_producer.send(Message("orders", b"fine"))).status.name == "SEND_OK"
    with pytest.raises(SendError, match="'secret-plans' is denied by acme_guard pattern 'secret-\\*'"):
        await trocket_producer.send(Message("secret-plans", b"no"))
    with pytest.raises(SendError, match="'payroll' is denied"):
        await trocket_producer.send_batch([Message("payroll", b"a"), Message("payroll", b"b")])
    guard = trocket_broker.running.broker.ctx.stash[GUARD]
    assert guard.refused == {"secret-plans": 1, "payroll": 1}


async def test_nothing_refused_reaches_a_consumer(trocket_producer, trocket_consumer):
    with pytest.raises(SendError):
        await trocket_producer.send(Message("secret-x", b"no"))
    await trocket_producer.send(Message("secret", b"the pattern needs a dash"))
    [received] = await trocket_consumer.receive("secret", 1)
    assert received.body == b"the pattern needs a dash"


def test_an_empty_pattern_stops_the_broker_naming_the_key(tmp_path):
    host = BrokerThread(tmp_path, BrokerSettings(("acme_guard",), {"acme_guard": {"deny": [""]}}))
    with pytest.raises(ConfigError, match="acme_guard.*deny.*non-empty topic patterns"):
        host.start()
