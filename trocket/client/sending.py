"""What a send is, without its I/O: the checks, the request, the queue choice and what each
answer means, shared by the trio :class:`~trocket.client.Producer` and the
:class:`~trocket.client.BlockingProducer`.

Both producers run the same attempts (RocketMQ's ``sendDefaultImpl``): a queue chosen round
robin over the topic's writable queues, skipping brokers the latency fault tolerance isolated;
a failed attempt retried on another broker when there is one, ``send_timeout`` the budget for
all attempts together. Only how a request reaches a broker differs (a trio connection, or a
blocking socket), so :class:`SendAttempts` holds the rules and each producer drives it.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from typing import Any

import attrs

from kernel.model import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ_KEY,
)
from kernel.model import (
    PROPERTY_WAIT_STORE_MSG_OK,
    SYSFLAG_COMPRESSED,
    MessageQueue,
)
from trocket.client.batch import encode_messages
from trocket.client.errors import InvalidMessage, SendError
from trocket.client.fault import LatencyFaultTolerance
from trocket.client.message import Message, SendResult, SendStatus
from trocket.client.message_id import new_message_id
from trocket.client.routes import PublishInfo
from trocket.client.selectors import QueueSelector
from wire.message import properties_text
from wire.remoting import RemotingCommand, RequestCode, ResponseCode, code_name

RETRY_TOPIC_PREFIX = "%RETRY%"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
STORED = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
RETRIED_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
    }
)
"""Broker answers worth another attempt on another broker (as RocketMQ's producer)."""


def split_addresses(addresses: str | Sequence[str]) -> tuple[str, ...]:
    """NameServer addresses as RocketMQ takes them: a list, or one string split on ``;`` or ``,``."""
    if isinstance(addresses, str):
        addresses = addresses.replace(",", ";").split(";")
    return tuple(a.strip() for a in addresses if a.strip())


def identified(message: Message) -> dict[str, str]:
    """The wire properties, with a new client unique id unless the caller set one."""
    properties = message.wire_properties()
    properties.setdefault(PROPERTY_UNIQ_KEY, new_message_id())
    return properties


@attrs.frozen
class SendRules:
    """The settings a request is built with (the producer's own, shared by both kinds)."""

    group: str
    compress_over: int = 4096
    compress_level: int = 5
    max_message_size: int = 4 * 1024 * 1024
    default_topic_queue_nums: int = 4

    def check(self, message: Message) -> None:
        if not message.topic or len(message.topic) > 127:
            raise InvalidMessage(f"topic {message.topic!r} is empty or longer than 127 characters")
        if not message.body:
            raise InvalidMessage("the message body is empty")
        if len(message.body) > self.max_message_size:
            raise InvalidMessage(
                f"the message body is {len(message.body)} bytes; the limit is {self.max_message_size}"
            )

    def body(self, message: Message) -> tuple[bytes, int]:
        """The checked body as it travels, and its sysFlag (bit 0: zlib-compressed)."""
        self.check(message)
        if len(message.body) > self.compress_over:
            compressed = zlib.compress(message.body, self.compress_level)
            if len(compressed) < len(message.body):  # random or already-compressed data grows
                return compressed, SYSFLAG_COMPRESSED
        return message.body, 0

    def batch(self, messages: Sequence[Message]) -> tuple[str, bytes, list[str]]:
        """A batch's topic, encoded body and message ids. Batches are not compressed and cannot
        be delayed, as in RocketMQ."""
        if not messages:
            raise InvalidMessage("an empty batch")
        topics = {m.topic for m in messages}
        if len(topics) != 1:
            raise InvalidMessage(f"a batch must have one topic, got {sorted(topics)}")
        if any(m.delay_level > 0 for m in messages):
            raise InvalidMessage("batched messages cannot have a delay level")
        (topic,) = topics
        self.check(messages[0])
        lengths = [len(m.body) for m in messages]
        if min(lengths) == 0:
            raise InvalidMessage(f"the body of batch message {lengths.index(0)} is empty")
        if max(lengths) > self.max_message_size:
            raise InvalidMessage(
                f"a message body is {max(lengths)} bytes; the limit is {self.max_message_size}"
            )
        try:
            body, ids = encode_messages(messages)
        except ValueError as error:
            raise InvalidMessage(str(error)) from None
        if len(body) > self.max_message_size:
            raise InvalidMessage(f"the batch is {len(body)} bytes; the limit is {self.max_message_size}")
        return topic, body, ids

    def single(self, message: Message) -> tuple[RemotingCommand, str]:
        """A one-message send's request and its client unique id."""
        body, sys_flag = self.body(message)
        properties = identified(message)
        request = self.request(message.topic, message.flag, sys_flag, properties, body)
        return request, properties[PROPERTY_UNIQ_KEY]

    def request(
        self,
        topic: str,
        flag: int,
        sys_flag: int,
        properties: dict[str, str],
        body: bytes,
        *,
        code: int = RequestCode.SEND_MESSAGE_V2,
        queue_id: int = 0,
    ) -> RemotingCommand:
        """The SEND_MESSAGE_V2 (or SEND_BATCH_MESSAGE) request; the queue id is set per attempt."""
        properties.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")
        reconsume_times = 0
        if topic.startswith(RETRY_TOPIC_PREFIX):  # a consumer's own retry copy (see send_back)
            reconsume_times = int(properties.get(PROPERTY_RECONSUME_TIME, "0") or 0)
        header = {  # every value a string: the command takes the dict as it is
            "a": self.group,
            "b": topic,
            "c": "TBW102",
            "d": str(self.default_topic_queue_nums),
            "e": str(queue_id),
            "f": str(sys_flag),
            "g": str(int(time.time() * 1000)),
            "h": str(flag),
            "i": properties_text(properties),
            "j": str(reconsume_times),
            "k": "false",
            "m": "true" if code == RequestCode.SEND_BATCH_MESSAGE else "false",
        }
        return RemotingCommand(code, header, body)


@attrs.define(eq=False)
class QueuePicker:
    """Round robin over a topic's queues, skipping isolated brokers and (on a retry) the broker
    that just failed; when every broker is isolated, the least bad one."""

    faults: LatencyFaultTolerance
    counter: int = 0

    def pick(self, queues: Sequence[MessageQueue], avoid: str | None) -> MessageQueue:
        self.counter += 1
        count = len(queues)
        for i in range(count):
            queue = queues[(self.counter + i) % count]
            if queue.broker_name != avoid and self.faults.available(queue.broker_name):
                return queue
        others = [q for q in queues if q.broker_name != avoid] or list(queues)
        best = self.faults.least_bad(sorted({q.broker_name for q in others}))
        candidates = [q for q in others if q.broker_name == best]
        return candidates[self.counter % len(candidates)]


@attrs.define(eq=False)
class SendAttempts:
    """One send's attempts: which queue each goes to and what each answer means. The producer
    loops ``while left := attempts.next(now)``: it asks the route (``attempts.refresh_route``
    says whether to ask the NameServer afresh), calls :meth:`target`, sends within ``left``
    seconds, and reports :meth:`failed` or :meth:`answered` (then drops the topic's cached
    route when ``forget_route`` says so); :meth:`outcome` then gives the result or raises."""

    topic: str
    request: RemotingCommand
    msg_id: str
    picker: QueuePicker
    deadline: float
    budget: float
    attempts: int
    retry_another_broker_when_not_store_ok: bool = False
    fixed: MessageQueue | None = None
    selector: QueueSelector | None = None
    arg: Any = None
    attempt: int = 0
    queue: MessageQueue | None = None
    result: SendResult | None = None
    forget_route: bool = False
    """The broker said the topic does not exist: the cached route is stale."""
    _done: bool = False
    _stored: SendResult | None = None
    _avoid: str | None = None
    _last_error: str = "no attempt was made"
    _last_code: int | None = None

    @classmethod
    def start(
        cls,
        topic: str,
        request: RemotingCommand,
        msg_id: str,
        picker: QueuePicker,
        *,
        now: float,
        budget: float,
        retries: int,
        retry_another_broker_when_not_store_ok: bool = False,
        fixed: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> SendAttempts:
        """With ``fixed`` or ``selector`` (ordered messages) the queue is pinned and a failure is
        not retried elsewhere."""
        pinned = fixed is not None or selector is not None
        return cls(
            topic, request, msg_id, picker, now + budget, budget, 1 if pinned else 1 + retries,
            retry_another_broker_when_not_store_ok, fixed, selector, arg,
        )  # fmt: skip

    @property
    def refresh_route(self) -> bool:
        return self.attempt > 1

    def next(self, now: float) -> float:
        """The seconds the next attempt may take, or 0 when there is none to make."""
        if self._done or self.attempt >= self.attempts:
            return 0.0
        left = self.deadline - now
        if left <= 0:
            spent = f"{self.budget:.3g}s spent in {self.attempt} attempt(s)"
            self._last_error = f"send timeout: {spent}; last: {self._last_error}"
            self._done = True
            return 0.0
        self.attempt += 1
        self.forget_route = False
        return left

    def target(self, info: PublishInfo) -> str:
        """The address of the broker this attempt goes to (the request's queue id set)."""
        if self.fixed is not None:
            queue = self.fixed
        elif self.selector is not None:
            queue = self.selector(list(info.queues), self.arg)
        else:
            queue = self.picker.pick(info.queues, self._avoid)
        address = info.addresses.get(queue.broker_name)
        if address is None:
            raise SendError(f"broker {queue.broker_name!r} has no live master for topic {self.topic!r}")
        self.request.ext["e"] = str(queue.queue_id)
        self.queue = queue
        return address

    def failed(self, address: str, error: Exception) -> None:
        """The attempt got no answer (connection refused or lost, timed out)."""
        assert self.queue is not None
        self.picker.faults.record(self.queue.broker_name, 0, failed=True)
        self._last_error, self._last_code = f"{self.queue.broker_name} ({address}): {error}", None
        self._avoid = self.queue.broker_name

    def answered(self, response: RemotingCommand, latency_ms: float) -> SendResult | None:
        """The result when the broker stored the message (``None`` otherwise). Another attempt
        follows a refusal worth retrying, or a store that was not durable enough with
        ``retry_another_broker_when_not_store_ok``.

        :raises SendError: the broker refused in a way no other broker would change.
        """
        queue = self.queue
        assert queue is not None
        self.picker.faults.record(queue.broker_name, latency_ms)
        status = STORED.get(response.code)  # type: ignore[call-overload]
        if status is None:
            answer = code_name(response.code, response=True)
            self._last_error = f"{queue.broker_name} answered {answer}: {response.remark or ''}"
            self._last_code = response.code
            if response.code in RETRIED_CODES:
                self._avoid = queue.broker_name
                self.forget_route = response.code == ResponseCode.TOPIC_NOT_EXIST
                return None
            self._done = True
            raise SendError(f"send to {self.topic!r} refused: {self._last_error}", response.code)
        ext = response.ext
        result = SendResult(
            status,
            self.msg_id,
            str(ext.get("msgId", "")),
            MessageQueue(self.topic, queue.broker_name, int(ext.get("queueId", queue.queue_id))),
            int(ext.get("queueOffset", -1)),
        )
        if status is SendStatus.SEND_OK or not self.retry_another_broker_when_not_store_ok:
            self._done = True
            self.result = result
        else:
            self._stored, self._avoid = result, queue.broker_name  # not durably enough: try elsewhere
        return result

    def outcome(self) -> SendResult:
        """The send's result once no attempt is left.

        :raises SendError: every allowed attempt failed or the budget ran out.
        """
        if self.result is not None:
            return self.result
        if self._stored is not None:
            return self._stored
        raise SendError(
            f"send to {self.topic!r} failed after {self.attempts} attempt(s): {self._last_error}",
            self._last_code,
        )
