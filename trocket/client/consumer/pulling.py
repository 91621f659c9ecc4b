"""One PULL_MESSAGE round trip as a consumer makes it, and what its answer means.

The broker holds a request with the suspend flag for up to ``suspend_ms`` when nothing is
there (long polling), so the request timeout is longer than that, as in RocketMQ
(``CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND`` 30 s against a 15 s suspend).
"""

from __future__ import annotations

import enum
import struct

import attrs

from kernel.errors import CorruptRecord
from kernel.model import MessageQueue
from trocket.client.consumer.received import PulledMessages, ReceivedMessage, decode_pulled
from trocket.client.errors import ClientError
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from wire.subscription import Subscription

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
SUSPEND_MS = 15_000
"""``brokerSuspendMaxTimeMillis``."""
PULL_TIMEOUT = 30.0
"""``consumerTimeoutMillisWhenSuspend``."""


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class PullError(ClientError):
    """The broker refused a pull (``code`` and its remark), or its answer was damaged."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


@attrs.frozen
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: PulledMessages | list[ReceivedMessage]
    """Those matching the subscription's exact tags (the broker filters by hash): a list, or
    with ``pull(lazy=True)`` and no tags a :class:`PulledMessages` (made when asked for)."""
    raw_bytes: int = 0


@attrs.frozen
class RawPull:
    """A pull answer with its records left as the stored bytes (for readers that decode in
    bulk, such as the Spark source)."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes


async def pull_raw(
    remoting: RemotingClient,
    address: str,
    group: str,
    queue: MessageQueue,
    offset: int,
    subscription: Subscription,
    *,
    max_nums: int = 32,
    commit_offset: int = -1,
    suspend_ms: int = SUSPEND_MS,
    timeout: float | None = None,
) -> RawPull:
    """One PULL_MESSAGE round trip; the answer's records stay undecoded.

    :raises PullError: the broker answered with an error code.
    :raises RemotingError: the broker could not be reached or did not answer in time.
    """
    sys_flag = FLAG_SUBSCRIPTION | (FLAG_SUSPEND if suspend_ms > 0 else 0)
    if commit_offset >= 0:
        sys_flag |= FLAG_COMMIT_OFFSET
    request = RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": group,
            "topic": queue.topic,
            "queueId": queue.queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_nums,
            "sysFlag": sys_flag,
            "commitOffset": max(commit_offset, 0),
            "suspendTimeoutMillis": suspend_ms,
            "subscription": subscription.expression,
            "subVersion": subscription.version,
            "expressionType": subscription.expression_type,
        },
    )
    if timeout is None:
        timeout = PULL_TIMEOUT + suspend_ms / 1000
    response = await remoting.invoke(address, request, timeout)
    status = _STATUS.get(response.code)  # type: ignore[call-overload]
    if status is None:
        raise PullError(
            f"pull {queue.topic}:{queue.broker_name}:{queue.queue_id}@{offset} refused by {address}: "
            f"code {response.code} {response.remark or ''}".rstrip(),
            response.code,
        )
    return RawPull(
        status,
        int(response.ext.get("nextBeginOffset", offset)),
        int(response.ext.get("minOffset", 0)),
        int(response.ext.get("maxOffset", 0)),
        bytes(response.body) if status is PullStatus.FOUND else b"",
    )


async def pull(
    remoting: RemotingClient,
    address: str,
    group: str,
    queue: MessageQueue,
    offset: int,
    subscription: Subscription,
    *,
    max_nums: int = 32,
    commit_offset: int = -1,
    suspend_ms: int = SUSPEND_MS,
    lazy: bool = False,
) -> PullResult:
    """Pull from ``offset``; with ``commit_offset >= 0`` the broker also records that offset for
    ``group`` (RocketMQ's piggy-backed commit). ``lazy``: the messages as
    :class:`~trocket.client.consumer.received.PulledMessages`, each made when asked for (a
    consumer that buffers them), else as a list.

    :raises PullError: the broker answered with an error code, or sent a damaged record.
    :raises RemotingError: the broker could not be reached or did not answer in time.
    """
    raw = await pull_raw(
        remoting,
        address,
        group,
        queue,
        offset,
        subscription,
        max_nums=max_nums,
        commit_offset=commit_offset,
        suspend_ms=suspend_ms,
    )
    messages: PulledMessages | list[ReceivedMessage] = []
    if raw.status is PullStatus.FOUND:
        try:
            pulled = decode_pulled(raw.body, queue)
        except (CorruptRecord, struct.error, IndexError, UnicodeDecodeError) as error:
            raise PullError(f"pull answer from {address} holds a damaged record: {error}") from None
        if subscription.tags is not None:
            messages = pulled.tagged(subscription.tags)
        else:
            messages = pulled if lazy else pulled.messages()
    return PullResult(
        raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset, messages, len(raw.body)
    )
