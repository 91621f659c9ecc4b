"""What a message's properties ask of the broker: a delay (a level or one of RocketMQ 5's timer
properties), a transaction, a wait for the store. Asked several times a send, so answered
without scanning the properties in Python; the answers are RocketMQ's."""

from __future__ import annotations

import pytest

from wire.message import Message


@pytest.mark.parametrize(
    ("properties", "delayed"),
    [
        ({}, False),
        ({"UNIQ_KEY": "id", "WAIT": "true", "TAGS": "a"}, False),
        ({"DELAY": "3"}, True),
        ({"DELAY": "0"}, False),
        ({"DELAY": ""}, False),
        ({"DELAY": "-1"}, False),
        ({"DELAY": "soon"}, False),  # not a number: no level, as RocketMQ's parse failure
        ({"TIMER_DELIVER_MS": "1700000000000"}, True),
        ({"TIMER_DELAY_MS": "5"}, True),
        ({"TIMER_DELAY_SEC": "5"}, True),
        ({"DELAY": "0", "TIMER_DELAY_SEC": "5"}, True),
    ],
)
def test_wants_delay(properties: dict[str, str], delayed: bool) -> None:
    assert Message("T", b"body", properties=properties).wants_delay is delayed
