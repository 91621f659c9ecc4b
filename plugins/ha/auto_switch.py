"""The replicator of controller mode: master or slave as the controller decides, at run time.

Why a second replicator: a 4.x replica keeps its role for life, so the plain ``ha`` replicator
builds either a server or a client. Here both exist; the HA port always listens but serves
slaves only while this replica is master, and the client runs only while it is a slave.

What a master adds (RocketMQ 5's AutoSwitchHAService):

- the **confirm offset**: the smallest offset every SyncStateSet member acknowledged (members
  being added count from the moment they are proposed, members being removed until the
  controller agreed). Dispatch stops there, so consumers see only confirmed messages, and a
  SYNC_MASTER acknowledges a put once the confirm offset covers it;
- the **SyncStateSet upkeep**: a member not caught up for ``max_time_slave_not_catchup`` is
  removed, a connected replica that holds everything confirmed is added, each change agreed
  by the controller first (``ALTER_SYNC_STATE_SET``); before members leave, the master
  flushes its commit log, since what they held is then on its disk alone;
- **fencing**: past its lease deadline (set by the controller agent) no put is acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from kernel.context import BrokerContext
from kernel.errors import FlushError
from kernel.latency import LatencyHistogram
from kernel.model import AppendResult, BrokerRole, Replication
from kernel.protocols import ReplicableStore
from kernel.sync import Watermark
from kernel.tls_config import client_tls, server_tls
from plugins.ha.config import HaConfig
from plugins.ha.master import HaServer, SlaveConnection
from plugins.ha.replicator import HaStatistics
from plugins.ha.slave import HaClient

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class AutoSwitchReplicator:
    """See the module docstring."""

    ack_role: BrokerRole
    """SYNC_MASTER or ASYNC_MASTER: how puts are acknowledged while this replica is master."""
    broker_id: int
    config: HaConfig
    store: ReplicableStore
    server: HaServer
    client: HaClient
    name: str = "ha"
    confirmed: Watermark = attrs.field(factory=Watermark, init=False)
    """What consumers may see: see the module docstring (on a slave, what it received)."""
    is_master: bool = False
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0
    lease_deadline: float = 0.0
    """``trio.current_time()`` past which this master acknowledges nothing (fenced)."""
    alter: Callable[[frozenset[int], int], Awaitable[tuple[frozenset[int], int] | None]] | None = None
    """Asks the controller for a new SyncStateSet (given the current set epoch); the agreed set
    and its epoch, or None when refused. Set by the controller agent."""
    _pending: frozenset[int] = attrs.field(default=frozenset(), init=False)
    _has_master: bool = attrs.field(default=False, init=False)
    """A slave that follows a master: only then does its confirm offset follow its log (see
    :meth:`_following`)."""
    _caught_up_at: dict[int, float] = attrs.field(factory=dict, init=False)
    _end_at_last_ack: dict[int, int] = attrs.field(factory=dict, init=False)
    _mode_changed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _client_scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    _client_done: trio.Event | None = attrs.field(default=None, init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    _master_since: float = attrs.field(default=0.0, init=False)
    _latency: LatencyHistogram = attrs.field(factory=LatencyHistogram, init=False)
    fenced_puts: int = 0
    deposed_puts: int = 0
    """Puts that waited for their replicas while this replica stopped being master (or was
    elected again): each answered as not replicated, whatever the confirm offset says."""
    alone_shows_flushed: bool = False
    """A master alone in its SyncStateSet lets consumers see only what it has flushed when it
    acknowledges after fsync (sync flush, or ``visible_after_flush``) or acknowledges nothing
    alone (``min_in_sync_replicas`` > 1): what it wrote but did not flush is on no disk and no
    replica, and a consumer that read it would have read a message a power cut then takes
    (fault scenario S8, two bodies at one offset)."""
    flush_log: Callable[[], Awaitable[int]] | None = None
    """The store's flush of its commit log (everything written), run before members leave the
    SyncStateSet (see :meth:`_flush_before_members_leave`)."""

    @classmethod
    def make(cls, ctx: BrokerContext, store: ReplicableStore) -> AutoSwitchReplicator:
        config = ctx.plugin_config(HaConfig)
        port = config.listen_port if config.listen_port is not None else ctx.broker.listen_port + 1
        server = HaServer(store, store, config, ctx.broker.listen_host, port, tls=server_tls(ctx.config))  # type: ignore[arg-type]
        server.expect_hello = True
        server.serving = False
        client = HaClient(
            store,
            config,
            tls=client_tls(ctx.config),
            hello_id=ctx.broker.broker_id,
            learner=config.async_learner,
        )
        replicator = cls(ctx.broker.broker_role, ctx.broker.broker_id, config, store, server, client)
        replicator.alone_shows_flushed = (
            ctx.broker.flush == "sync"
            or ctx.broker.visible_after_flush
            or (config.min_in_sync_replicas > 1 and ctx.broker.broker_role is BrokerRole.SYNC_MASTER)
        )
        # The store's own flush: every Store has one; the ReplicableStore contract does not name it.
        replicator.flush_log = getattr(store, "flush", None)
        server.on_ack = replicator._acked
        return replicator

    # --- the Replicator contract -----------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.server.run)
            self.confirmed.reset(self.store.positions.wrote.value)
            nursery.start_soon(self._follow_wrote)
            nursery.start_soon(self._keep_sync_state_set)
            nursery.start_soon(self.confirmed.expire_overdue_waiters)
            task_status.started()

    async def wait_replicated(self, result: AppendResult, *, wait: bool) -> Replication:
        if trio.current_time() > self.lease_deadline:
            self.fenced_puts += 1
            return Replication.TIMEOUT  # fenced: stored here, acknowledged nowhere
        if self.ack_role is not BrokerRole.SYNC_MASTER or not wait:
            return Replication.NOT_REQUIRED
        started = trio.current_time()
        deadline = min(started + self.config.sync_timeout, self.lease_deadline)
        epoch = self.master_epoch
        confirmed = await self.confirmed.wait_reached_by(result.end_offset, deadline)
        self._latency.observe(trio.current_time() - started)
        if not confirmed or trio.current_time() > self.lease_deadline:
            return Replication.TIMEOUT
        if not self.is_master or self.master_epoch != epoch:
            # Deposed while the put waited: the confirm offset now follows another master's
            # log, which may hold other messages where this put was appended (the tail is cut
            # when the histories are compared). Fault scenario S5: a deposed master's puts were
            # acknowledged at positions the new master had given to other sends.
            self.deposed_puts += 1
            return Replication.TIMEOUT
        if len(self.sync_state_set | {self.broker_id}) < self.config.min_in_sync_replicas:
            # The set shrank below minInSyncReplicas while this put waited: the confirm offset
            # then follows this master alone, which is not the replication the put needs
            # (RocketMQ fixes a put's needed acks when it is appended).
            return Replication.TIMEOUT
        return Replication.REPLICATED

    def ha_address(self) -> str:
        return self.server.address

    def master_learned(self, broker_addr: str, ha_addr: str) -> None:
        """The NameServer's answer is ignored: the controller names the master."""

    # --- role changes (called by the controller agent) --------------------------------------

    def become_master(self, epoch: int, members: frozenset[int], set_epoch: int) -> None:
        self._stop_client()
        self.is_master = True
        self.master_epoch = epoch
        self.sync_state_set, self.sync_state_set_epoch = members, set_epoch
        self._pending = frozenset()
        self._master_since = trio.current_time()
        self._caught_up_at.clear()
        self.server.serving = True
        self._changed()
        log.info("HA: master of epoch %d, SyncStateSet %s", epoch, sorted(members))

    def become_slave(self, master_ha_address: str) -> None:
        """Follow ``master_ha_address`` ("": follow nobody for now, while the agent truncates;
        the confirm offset stays where it is until then)."""
        self._has_master = bool(master_ha_address)
        if self.is_master:
            self.is_master = False
            self.server.serving = False
            for connection in list(self.server.connections):
                connection.drop("this broker stepped down")
        self._stop_client()
        if master_ha_address and self._nursery is not None:
            self.client.follow(master_ha_address)
            self._nursery.start_soon(self._run_client)
        self._changed()

    async def stop_following(self) -> None:
        """Stop replicating from a master (a slave about to take over) and wait until the
        client has ended: nothing it received is appended after this returns, not even a
        large write a worker thread was copying."""
        self._stop_client()
        if self._client_done is not None:
            await self._client_done.wait()
        self._changed()

    def set_sync_state_set(self, members: frozenset[int], set_epoch: int) -> None:
        if set_epoch > self.sync_state_set_epoch:
            self.sync_state_set, self.sync_state_set_epoch = members, set_epoch
            self._changed()

    def truncated(self, offset: int) -> None:
        """The log was cut at ``offset`` (below the confirm offset only after an unclean election)."""
        if self.confirmed.value > offset:
            self.confirmed.reset(offset)

    def _stop_client(self) -> None:
        if self._client_scope is not None:
            self._client_scope.cancel()
            self._client_scope = None

    async def _run_client(self) -> None:
        done = self._client_done = trio.Event()
        try:
            with trio.CancelScope() as scope:
                self._client_scope = scope
                await self.client.run()
        finally:
            done.set()

    def _changed(self) -> None:
        self._mode_changed.set()
        self._mode_changed = trio.Event()
        self._recompute()

    # --- the confirm offset ---------------------------------------------------------------

    def _watched(self) -> frozenset[int]:
        return (self.sync_state_set | self._pending) - {self.broker_id}

    def _following(self) -> bool:
        """Whether the confirm offset follows the log end: on a slave following a master (its
        log is the master's), or on a master alone in its set. Not on a slave between masters:
        a master that steps down holds a tail its set never acknowledged, which the agent is
        about to compare with the new master's history and cut; confirmed, dispatch would show
        it to consumers first (fault scenario S1: a deposed master, resumed after a pause,
        appended a send still queued on its socket, stepped down, and a long-polling consumer
        read that message at an offset the new master had given to another)."""
        if not self.is_master:
            return self._has_master
        return not self._watched()

    async def _follow_wrote(self) -> None:
        """On a slave that follows a master, or a master alone in its set, the confirm offset
        is the log end; for a master alone that acknowledges only after fsync, the flushed
        position (see :attr:`alone_shows_flushed`)."""
        while True:
            if self._following():
                position = self._alone_position()
                with trio.move_on_after(1):
                    await position.wait_reached(self.confirmed.value + 1)
                if self._following():
                    self.confirmed.advance(self._alone_position().value)
            else:
                await self._mode_changed.wait()

    def _alone_position(self) -> Watermark:
        positions = self.store.positions  # type: ignore[attr-defined]
        flushed: Watermark = positions.flushed
        wrote: Watermark = positions.wrote
        return flushed if self.is_master and self.alone_shows_flushed else wrote

    def _acks(self) -> dict[int, int]:
        """What each connected replica acknowledged (async learners left out)."""
        acks: dict[int, int] = {}
        for connection in self.server.connections:
            if connection.broker_id is not None and not connection.learner:
                acks[connection.broker_id] = max(
                    acks.get(connection.broker_id, -1), connection.confirmed_offset
                )
        return acks

    def _recompute(self) -> None:
        """A master with replicas in its set: the smallest offset they all acknowledged."""
        if not self.is_master or not self._watched():
            return
        acks = self._acks()
        lowest = min(acks.get(member, -1) for member in self._watched())
        if lowest > self.confirmed.value:
            self.confirmed.advance(min(lowest, self.store.positions.wrote.value))

    def _acked(self, connection: SlaveConnection) -> None:
        member = connection.broker_id
        if member is None or not self.is_master:
            return
        now = trio.current_time()
        end = self.store.positions.wrote.value
        if connection.confirmed_offset >= self._end_at_last_ack.get(member, end):
            self._caught_up_at[member] = now  # it holds what this log held at its last report
        self._end_at_last_ack[member] = end
        self._recompute()

    # --- the SyncStateSet -----------------------------------------------------------------

    async def _keep_sync_state_set(self) -> None:
        while True:
            await trio.sleep(self.config.sync_state_set_check_interval)
            if self.is_master and self.alter is not None:
                await self._check_sync_state_set()

    async def _check_sync_state_set(self) -> None:
        now = trio.current_time()
        patience = self.config.max_time_slave_not_catchup
        members = self.sync_state_set - {self.broker_id}
        lagging = {m for m in members if now - self._caught_up_at.get(m, self._master_since) > patience}
        acks = self._acks()
        ready = {
            m
            for m, ack in acks.items()
            if m not in self.sync_state_set
            and ack >= self.confirmed.value
            and now - self._caught_up_at.get(m, -patience) <= 2 * self.config.sync_state_set_check_interval
        }
        if not lagging and not ready:
            return
        if lagging and not await self._flush_before_members_leave(lagging):
            lagging = set()
            if not ready:
                return
        wanted = (self.sync_state_set - lagging) | ready | {self.broker_id}
        self._pending = frozenset(ready)  # confirm waits for them from now on
        self._recompute()
        assert self.alter is not None
        try:
            agreed = await self.alter(frozenset(wanted), self.sync_state_set_epoch)
        finally:
            self._pending = frozenset()
        if agreed is not None:
            if lagging:
                log.warning(
                    "HA: replicas %s left the SyncStateSet (not caught up for %gs)", sorted(lagging), patience
                )
            if ready:
                log.info("HA: replicas %s joined the SyncStateSet", sorted(ready))
            self.set_sync_state_set(*agreed)
        self._changed()

    async def _flush_before_members_leave(self, leaving: set[int]) -> bool:
        """Flush the commit log before ``leaving`` stop counting; whether they may leave.

        What this master acknowledged while they were members is on their logs and in its page
        cache. Once they leave, the controller elects only from the smaller set, and their
        copies no longer count: a power cut of this master would take what it had not flushed,
        and the slaves, following the restarted master, would cut the same messages from their
        logs (fault scenario S8 with async flush and ``min_in_sync_replicas = 2``, chaos
        finding 10: 33 acknowledged messages lost, written less than four pages before the
        slaves paused, so the interval flush had skipped them). A master that cannot flush
        keeps them in the set: they still hold what it acknowledged, and stay electable."""
        if self.flush_log is None:
            return True
        try:
            await self.flush_log()
        except FlushError as error:
            log.error(
                "HA: replicas %s stay in the SyncStateSet: the commit log could not be flushed "
                "before they leave (%s), and they hold what this master acknowledged",
                sorted(leaving),
                error,
            )
            return False
        return True

    # --- figures --------------------------------------------------------------------------

    def runtime_info(self) -> dict[str, Any]:
        slaves = self.server.statistics()
        return {
            "master": self.is_master,
            "masterEpoch": self.master_epoch,
            "confirmOffset": self.confirmed.value,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "masterCommitLogMaxOffset": self.store.positions.wrote.value,
            "inSyncSlaveNums": len(self.sync_state_set - {self.broker_id}),
            "haConnectionInfo": [
                {
                    "addr": s.address,
                    "slaveAckOffset": s.ack_offset,
                    "diff": s.behind_bytes,
                    "inSync": s.in_sync,
                }
                for s in slaves
            ],
            "haClientRuntimeInfo": attrs.asdict(self.client.statistics()) if not self.is_master else None,
        }

    def statistics(self) -> HaStatistics:
        return HaStatistics(
            "MASTER" if self.is_master else "SLAVE",
            self.server.address if self.is_master else "",
            self.server.statistics(),
            self.confirmed.value,
            None if self.is_master else self.client.statistics(),
            self._latency.snapshot(),
        )
