"""What the push and the lite pull consumer share: their common options and the set-up that
joins a group (resolve the strategy, open a session, pick the offset store)."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import attrs
import trio

from kernel.protocols import AllocateStrategyFn
from trocket.client.consumer.allocation import resolve_strategy
from trocket.client.consumer.modes import ConsumeFromWhere, MessageModel
from trocket.client.consumer.offset_store import OffsetStore, offset_store_for
from trocket.client.consumer.rebalance import REBALANCE_INTERVAL, Rebalancer, half_hour_ago_ms
from trocket.client.consumer.received import ReceivedMessage
from trocket.client.consumer.session import HEARTBEAT_INTERVAL, ConsumerSession, open_session
from trocket.client.credentials import resolve_credentials
from trocket.client.errors import ClientError
from trocket.client.message_id import new_message_id
from trocket.client.producer import enter_trace_dispatcher
from trocket.client.sending import split_addresses
from trocket.client.tls import resolve_tls
from trocket.client.trace import ConsumeTrace, TraceDispatcher, consume_started
from wire.remoting.busy_poll import BusyPollSetting
from wire.remoting.signature import SessionCredentials
from wire.subscription import Subscription
from wire.trace_data import TRACE_TOPIC

log = logging.getLogger(__name__)
RETRY_SOON = 1.0
"""Seconds to the next rebalance after one that could not take everything it was given."""


@attrs.define(eq=False)
class ConsumerBase:
    """Options with RocketMQ's defaults (``docs/client.md`` lists their RocketMQ names)."""

    group: str
    namesrv_addr: str | Sequence[str] = "127.0.0.1:9876"
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET
    consume_timestamp_ms: int | None = None
    """For ``TIMESTAMP``: epoch milliseconds (default: half an hour before the queue is taken)."""
    allocate_strategy: str | AllocateStrategyFn = "averagely"
    allocate_options: Mapping[str, str] = attrs.field(factory=dict)
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000
    rebalance_interval: float = REBALANCE_INTERVAL
    instance_name: str | None = None
    offset_store_dir: Path | None = None
    """Broadcasting: where offsets are kept (default ``~/.rocketmq_offsets``)."""
    credentials: SessionCredentials | None = None
    """ACL credentials every request is signed with (default: ``TROCKET_ACCESS_KEY`` and
    ``TROCKET_SECRET_KEY`` when set)."""
    tls: ssl.SSLContext | bool | None = None
    """TLS to NameServers and brokers: a context (:func:`trocket.client.tls_context`),
    ``True`` (the system's CAs), or ``None``: ``TROCKET_TLS``/``TROCKET_TLS_CA_FILE`` decide."""
    busy_poll: BusyPollSetting = "auto"
    """Whether the event loop polls instead of sleeping right after a request or a receive:
    ``"auto"`` (the default) while answers come faster than 200 µs, a number of seconds to
    always poll that long, ``0`` never (docs/performance.md, ``wire.remoting.busy_poll``)."""

    trace: bool = False
    """Message trace (RocketMQ's ``enableMsgTrace``): a SubBefore record of each message handed
    to the application and a SubAfter record with the outcome, written in the background to
    :attr:`trace_topic` (:mod:`trocket.client.trace`)."""
    trace_topic: str = TRACE_TOPIC
    """Where trace records go (RocketMQ's ``customizedTraceTopic``)."""

    _tracer: TraceDispatcher | None = attrs.field(default=None, init=False)
    _subscriptions: dict[str, Subscription] = attrs.field(factory=dict, init=False)
    _session: ConsumerSession | None = attrs.field(default=None, init=False)
    _offsets: OffsetStore | None = attrs.field(default=None, init=False)
    _stack: AsyncExitStack | None = attrs.field(default=None, init=False)
    _rebalancer: Rebalancer | None = attrs.field(default=None, init=False)
    _retry_soon: bool = attrs.field(default=False, init=False)
    _rebalancing: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    """One rebalance at a time: the one at start and the loop's (woken by a membership change)
    can overlap, and two overlapping ones would each take the same queue and pull it twice."""

    def _check_startable(self) -> tuple[AllocateStrategyFn, tuple[str, ...]]:
        """:raises ClientError: already started, a bad strategy or no NameServer address."""
        if self._stack is not None:
            raise ClientError(f"consumer {self.group!r} is already started")
        allocate = resolve_strategy(self.allocate_strategy, self.allocate_options)
        addresses = split_addresses(self.namesrv_addr)
        if not addresses:
            raise ClientError("no NameServer address given")
        return allocate, addresses

    async def _join(
        self,
        stack: AsyncExitStack,
        allocate: AllocateStrategyFn,
        addresses: tuple[str, ...],
        consume_type: str,
        subscriptions: dict[str, Subscription],
    ) -> ConsumerSession:
        """Open the session (closed by ``stack``), its offset store and rebalancer."""
        session = await open_session(
            stack, self.group, addresses, self.message_model.value, consume_type,
            self.consume_from_where.value, subscriptions, self.instance_name,
            resolve_credentials(self.credentials), resolve_tls(self.tls), self.busy_poll,
        )  # fmt: skip
        self._session = session
        self._offsets = offset_store_for(
            session, self.message_model, self.consume_from_where, self.offset_store_dir
        )
        self._rebalancer = Rebalancer(session, allocate)
        return session

    async def _enter_tracer(self, stack: AsyncExitStack, addresses: tuple[str, ...]) -> None:
        """With :attr:`trace`: the trace dispatcher, closed by ``stack`` (enter it before the
        nursery whose tasks consume, so their last records are written)."""
        if self.trace:
            self._tracer = await enter_trace_dispatcher(
                stack, self.group, "CONSUME", addresses, self.trace_topic,
                credentials=self.credentials, tls=self.tls, busy_poll=self.busy_poll,
            )  # fmt: skip

    def _trace_started(self, messages: Sequence[ReceivedMessage]) -> ConsumeTrace | None:
        """SubBefore records of ``messages``, queued for writing; what their SubAfter records
        need (None without :attr:`trace`, or when none of them is traced)."""
        if self._tracer is None:
            return None
        trace, entries = consume_started(self.group, messages, new_message_id())
        self._tracer.append(entries)
        return trace if trace.started else None

    def _start_timestamp_ms(self) -> int:
        return self.consume_timestamp_ms if self.consume_timestamp_ms is not None else half_hour_ago_ms()

    async def _rebalance(self) -> None:
        """Take and give up queues as the current assignment says (each consumer's own)."""
        raise NotImplementedError

    async def _rebalance_once(self) -> None:
        async with self._rebalancing:
            await self._rebalance()

    async def _announce(self, topics: Iterable[str]) -> None:
        """Learn the topics' brokers, tell them who we are, then take our share at once."""
        assert self._session is not None
        for topic in list(topics):
            try:
                await self._session.queues_of(topic)
            except ClientError as error:
                log.warning("group %s: %s (will retry)", self.group, error)
        await self._session.heartbeat()
        await self._rebalance_once()

    async def _heartbeat_loop(self) -> None:
        assert self._session is not None
        while True:
            await trio.sleep(HEARTBEAT_INTERVAL)
            await self._session.heartbeat()

    async def _rebalance_loop(self) -> None:
        """Every ``rebalance_interval``, at once on a membership change, and after
        :data:`RETRY_SOON` when the last rebalance left something to retry."""
        assert self._session is not None
        while True:
            with trio.move_on_after(RETRY_SOON if self._retry_soon else self.rebalance_interval):
                await self._session.rebalance_wanted.wait()
            self._session.rebalance_wanted = trio.Event()
            await self._rebalance_once()
