"""What a listener returns and receives, and how it is called (async, or sync in a worker
thread so a blocking listener does not stall the consumer's event loop)."""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import attrs
import trio

from kernel.model import MessageQueue
from trocket.client.consumer.received import ReceivedMessage

log = logging.getLogger(__name__)


class ConsumeStatus(enum.Enum):
    """A concurrent listener's answer (``ConsumeConcurrentlyStatus``)."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    """Retry the batch later through the group's retry topic."""


class OrderlyStatus(enum.Enum):
    """An orderly listener's answer (``ConsumeOrderlyStatus``)."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    """Retry the same messages in place after ``suspend_current_queue_time`` (the queue waits:
    order is kept)."""


@attrs.define
class ConsumeContext:
    queue: MessageQueue
    delay_level_when_next_consume: int = 0
    """Concurrent listeners: the delay level of the retry (0: the broker's 3 + attempts)."""
    ack_index: int = -1
    """Concurrent listeners: with CONSUME_SUCCESS, messages after this index of a batch are
    retried (-1: all succeeded)."""
    suspend_current_queue_time: float = 1.0
    """Orderly listeners: seconds to wait before a suspended batch is tried again."""


Listener: TypeAlias = Callable[
    [Sequence[ReceivedMessage], ConsumeContext],
    "ConsumeStatus | OrderlyStatus | None | Awaitable[ConsumeStatus | OrderlyStatus | None]",
]


async def call_listener(
    listener: Listener, messages: Sequence[ReceivedMessage], context: ConsumeContext, timeout: float
) -> Any:
    """The listener's answer; ``None`` when it raised or overran ``timeout`` (``consumeTimeout``;
    a sync listener that overruns is abandoned in its thread). The caller treats ``None`` as
    "retry later", as RocketMQ treats an exception or a null status."""
    try:
        with trio.move_on_after(timeout):
            if inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(type(listener).__call__):
                return await listener(messages, context)  # type: ignore[misc]
            result = await trio.to_thread.run_sync(listener, messages, context, abandon_on_cancel=True)
            if inspect.isawaitable(result):
                return await result
            return result
        return None
    except Exception:  # a listener's bug must not stop consumption; the batch is retried
        log.exception(
            "listener failed on %d message(s) of %s; they will be retried", len(messages), context.queue
        )
        return None
