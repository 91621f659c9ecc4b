"""Broker: assembles a configuration into running services, phase by phase.

``Broker.assemble(config)`` loads the configured plugins, validates their tables and calls
``trocket_configure``; nothing starts. ``await nursery.start(broker.run)`` then opens the store,
recovers, and starts the phases outermost first (durability, derived views, scheduling,
export, ingress). Stopping goes the other way: ingress stops, inner phases drain with the
graceful deadline, then a shielded final flush and persist, and the abort marker is removed
only if all of that completed.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Sequence
from typing import Any

import attrs
import trio
from attrs import AttrsInstance

from kernel.config import Config
from kernel.context import BrokerContext
from kernel.dispatch import DispatchService, DispatchStatistics
from kernel.errors import ConfigError
from kernel.host import PluginHost
from kernel.lifecycle import AbortMarker
from kernel.model import (
    BrokerRole,
    FlushPolicyProvider,
    MessageBatch,
    Phase,
    PutResult,
    PutStatus,
    RecoveryReport,
    ReplicatorProvider,
    ServiceSpec,
    StoreProvider,
    flatten,
)
from kernel.open_files import raise_soft_limit
from kernel.protocols import Dispatcher, FlushPolicy, MessageStore, Replicator, TruncatableStore
from kernel.put import PutPipeline, PutStatistics

log = logging.getLogger(__name__)


@attrs.frozen
class BrokerStatistics:
    """A snapshot of a running broker."""

    state: str
    """``assembled``, ``starting``, ``running``, ``stopping`` or ``stopped``."""
    put: PutStatistics | None
    """The put pipeline's counts (None before the broker started)."""
    dispatch: DispatchStatistics | None
    """How far derived views are behind the log (None before the broker started)."""
    store: AttrsInstance | None
    """The store's own snapshot (its class is the store plugin's: ``attrs.asdict`` shows it)."""
    flush: AttrsInstance | None
    """The flush policy's snapshot (the flush plugin's class)."""
    replicator: AttrsInstance | None
    """The replicator's snapshot (the replication plugin's class); None when standalone."""


@attrs.define(eq=False)
class Broker:
    """One broker (and/or NameServer) assembled from config; see the module docstring."""

    config: Config
    host: PluginHost
    ctx: BrokerContext
    _stop_requested: trio.Event = attrs.field(factory=trio.Event, init=False)
    _stopped: trio.Event = attrs.field(factory=trio.Event, init=False)
    _stop_reason: str = attrs.field(default="", init=False)
    _stop_deadline: float = attrs.field(default=float("inf"), init=False)
    _state: str = attrs.field(default="assembled", init=False)
    _store: MessageStore | None = attrs.field(default=None, init=False)
    _flush: FlushPolicy | None = attrs.field(default=None, init=False)
    _replicator: Replicator | None = attrs.field(default=None, init=False)
    _put: PutPipeline | None = attrs.field(default=None, init=False)
    _dispatch: DispatchService | None = attrs.field(default=None, init=False)
    recovery: RecoveryReport | None = attrs.field(default=None, init=False)
    role: BrokerRole = attrs.field(default=BrokerRole.ASYNC_MASTER, init=False)
    writes_refused: str = attrs.field(default="", init=False)
    """Why puts are refused although this broker is a master ("" when they are not): a
    controller-mode master whose lease ran out (fenced)."""
    clean_stop: bool = attrs.field(default=False, init=False)

    @classmethod
    def assemble(cls, config: Config, *, plugin_objects: Sequence[tuple[str, object]] = ()) -> Broker:
        """Load plugins, validate their tables and run ``trocket_configure``.

        :param plugin_objects: extra (name, plugin) pairs registered besides the configured
            names (tests register in-process plugins this way).
        :raises kernel.errors.ConfigError: bad tables or cross-plugin rules.
        :raises kernel.errors.PluginError: unknown plugins, misspelt hooks.
        """
        host = PluginHost.load(config.broker.plugins, objects=plugin_objects)
        ctx = BrokerContext.assemble(config, host)
        host.hook.trocket_configure(config=config.broker, ctx=ctx)
        broker = cls(config=config, host=host, ctx=ctx)
        broker.role = config.broker.broker_role
        if "broker" in config.broker.roles:
            broker._select_providers()  # fail at assembly, not at start
        return broker

    def _select_providers(self) -> tuple[StoreProvider, FlushPolicyProvider, ReplicatorProvider | None]:
        cfg = self.config.broker
        store = self.host.select("store", self.host.stores(), cfg.store)
        flush = self.host.select("flush", self.host.flush_policies(), cfg.flush)
        replicators = self.host.replicators()
        replicator = None
        if cfg.replicator is not None:
            replicator = self.host.select("replicator", replicators, cfg.replicator)
        elif cfg.broker_role is not BrokerRole.ASYNC_MASTER:
            raise ConfigError(
                self.config.source,
                "broker.broker_role",
                f"{cfg.broker_role.value} needs a replicator; set [broker] replicator and load a "
                f"plugin providing one (loaded: {', '.join(p.name for p in replicators) or 'none'})",
            )
        return store, flush, replicator

    # --- running ---------------------------------------------------------------------------

    @property
    def store(self) -> MessageStore:
        if self._store is None:
            raise RuntimeError("the broker has no open store (not started, or a namesrv-only process)")
        return self._store

    @property
    def replicator(self) -> Replicator | None:
        return self._replicator

    @property
    def puts_acknowledged_at_once(self) -> bool:
        """Whether a put's answer waits for nothing but the append (async flush, no replica)."""
        return self._put is not None and self._put.acknowledges_at_once

    @property
    def state(self) -> str:
        return self._state

    def request_stop(self, reason: str = "requested") -> None:
        """Begin a graceful shutdown (sync; safe to call from any task, more than once)."""
        if not self._stop_requested.is_set():
            self._stop_reason = reason
            self._stop_deadline = trio.current_time() + self.config.broker.graceful_timeout
            self._stop_requested.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def run(self, *, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`request_stop`; ``task_status.started(self)`` once every service of
        every phase is serving.

        Resource handling: the store is closed and the abort marker removed (clean stop only)
        before this returns. Error handling: a crashing service ends the broker; its exception
        propagates (in an ExceptionGroup) and the abort marker stays.
        """
        try:
            if "broker" in self.config.broker.roles:
                await self._run_broker(task_status)
            else:
                await self._run_phases(self._service_phases(), task_status)
                self.clean_stop = True
        finally:
            self._state = "stopped"
            self._stopped.set()

    async def _run_broker(self, task_status: trio.TaskStatus[Broker]) -> None:
        store_provider, flush_provider, replicator_provider = self._select_providers()
        cfg = self.config.broker
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        before = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        soft, hard = raise_soft_limit()
        if soft != before:
            log.info("open files: limit raised from %d to %d (the hard limit)", before, soft)
        else:
            log.info("open files: limit %d (hard %d)", soft, hard)
        abort = AbortMarker(cfg.data_dir / "abort")
        self._state = "recovering"
        async with store_provider.open(self.ctx) as store:
            self._store = store
            self.recovery = await store.recover(clean_shutdown=not abort.exists())
            log.info("store recovered: %s", self.recovery)
            self.ctx.hook.trocket_store_recovered(report=self.recovery, ctx=self.ctx)
            abort.create()
            flush = flush_provider.make(self.ctx, store)
            replicator = replicator_provider.make(self.ctx, store) if replicator_provider else None
            self._flush, self._replicator = flush, replicator
            self._put = PutPipeline(self.ctx, store, flush, replicator, refusal=self._write_refusal)
            dispatchers: list[Dispatcher] = list(store.dispatchers())
            dispatchers += flatten(self.ctx.hook.trocket_register_dispatchers(ctx=self.ctx, store=store))
            self._dispatch = DispatchService(
                self.ctx,
                store,
                dispatchers,
                visible_after_flush=cfg.visible_after_flush,
                persist_interval=cfg.view_persist_interval,
                thorough_persist_interval=cfg.view_persist_thorough_interval,
                confirmed=getattr(replicator, "confirmed", None),
            )
            phases = self._service_phases()
            phases[Phase.DURABILITY] = [
                flush,
                *([replicator] if replicator else []),
                *phases[Phase.DURABILITY],
            ]
            phases[Phase.DERIVED] = [self._dispatch, *store.services(), *phases[Phase.DERIVED]]
            if self.role is BrokerRole.SLAVE and phases[Phase.SCHEDULING]:
                # Schedules deliver by putting, which a slave cannot: they are its master's work.
                log.info("slave: %d scheduling services stay stopped", len(phases[Phase.SCHEDULING]))
                phases[Phase.SCHEDULING] = []
            drained = False
            try:
                await self._run_phases(phases, task_status)
                drained = True
            finally:
                drained = await self._final_flush(flush, drained)
        if drained:
            abort.remove()
            self.clean_stop = True

    async def _final_flush(self, flush: FlushPolicy, drained: bool) -> bool:
        """Flush the log and persist every view, shielded but bounded by the grace period."""
        grace = max(self.config.broker.graceful_timeout, 1.0)
        with trio.move_on_after(grace, shield=True) as scope:
            await flush.final_flush()
            assert self._dispatch is not None
            if drained:
                # Anything appended after the last dispatch (none once ingress stopped) is
                # dispatched now, so the clean-stop promise "views match the log" holds.
                end = self._dispatch.limit().value
                offset = self._dispatch.dispatched.value
                while offset < end:
                    offset = await self._dispatch.dispatch_once(offset, end)
            await self._dispatch.persist(thorough=True)
        if scope.cancelled_caught:
            log.error("final flush did not finish within %.1fs; next start recovers abnormally", grace)
            return False
        return drained

    def _service_phases(self) -> dict[Phase, list[Any]]:
        roles = self.config.broker.roles
        specs: list[ServiceSpec] = flatten(self.ctx.hook.trocket_register_services(ctx=self.ctx))
        phases: dict[Phase, list[Any]] = {phase: [] for phase in Phase}
        for spec in sorted(specs, key=lambda s: s.name):
            if spec.roles & roles:
                phases[spec.phase].append(spec.make(self))
        return phases

    async def _run_phases(self, phases: dict[Phase, list[Any]], task_status: trio.TaskStatus[Broker]) -> None:
        self._state = "starting"
        await self._nest(sorted(phases.items()), task_status)

    async def _nest(
        self, phases: list[tuple[Phase, list[Any]]], task_status: trio.TaskStatus[Broker]
    ) -> None:
        if not phases:
            self._state = "running"
            self.ctx.hook.trocket_broker_ready(ctx=self.ctx)
            task_status.started(self)
            await self._stop_requested.wait()
            self._state = "stopping"
            log.info("stopping (%s)", self._stop_reason)
            self.ctx.hook.trocket_broker_stopping(ctx=self.ctx, reason=self._stop_reason)
            return
        (phase, services), inner = phases[0], phases[1:]
        async with trio.open_nursery() as nursery:
            log.debug("phase %s: starting %d services", phase.name, len(services))
            for service in services:
                await nursery.start(service.run)
            await self._nest(inner, task_status)
            with trio.move_on_at(self._stop_deadline):
                for service in services:
                    drain = getattr(service, "drain", None)
                    if drain is not None:
                        await drain()
            nursery.cancel_scope.cancel()

    # --- data path used by ingress plugins and services -----------------------------------

    async def put(self, batch: MessageBatch) -> PutResult:
        """Put a batch through the pipeline; a SLAVE refuses (RocketMQ: "message store is
        slave mode, so putMessage is forbidden"): its log is its master's copy."""
        if self._put is None:
            raise RuntimeError("the broker is not running")
        refused = self._write_refusal()
        if refused is not None:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, None, refused)
        return await self._put.put(batch)

    def _write_refusal(self) -> str | None:
        """Why this broker takes no writes now, or None: refused writes, or a SLAVE."""
        if self.writes_refused:
            return self.writes_refused
        if self.role is BrokerRole.SLAVE:
            cfg = self.config.broker
            return f"broker {cfg.broker_name} id {cfg.broker_id} is a SLAVE: send to its master"
        return None

    async def put_group(self, batches: Sequence[MessageBatch]) -> list[PutResult]:
        """:meth:`put` for batches that arrived together, appended with one store call where
        they can be (see ``PutPipeline.put_group``); one result per batch, in order."""
        if self._put is None:
            raise RuntimeError("the broker is not running")
        if self._write_refusal() is not None:
            return [await self.put(batch) for batch in batches]
        return await self._put.put_group(batches)

    async def wait_dispatched(self, offset: int | None = None) -> None:
        """Wait until derived views cover ``offset`` (default: everything written so far)."""
        assert self._dispatch is not None
        target = self.store.watermarks().wrote if offset is None else offset
        await self._dispatch.dispatched.wait_reached(target)

    def refuse_writes(self, reason: str) -> None:
        """Refuse every put with ``reason`` ("" accepts them again) without changing the role."""
        if reason != self.writes_refused:
            (log.warning if reason else log.info)(
                "writes %s", f"refused: {reason}" if reason else "accepted again"
            )
        self.writes_refused = reason

    async def truncate_log(self, offset: int) -> int:
        """Drop the log from ``offset`` on (a replica's divergent tail) with the views that point
        there, between two dispatch batches; returns where dispatch resumes. Only a SLAVE (no
        puts) of a store that can (:class:`~kernel.protocols.TruncatableStore`) truncates."""
        store = self.store
        if self.role is not BrokerRole.SLAVE or not isinstance(store, TruncatableStore):
            raise RuntimeError("only a SLAVE on a truncatable store drops its log's tail")
        assert self._dispatch is not None
        return await self._dispatch.rewind(lambda: store.truncate(offset))

    async def take_over(self) -> None:
        """A slave about to become master: wait until dispatch reached the log end, then let the
        store continue queue offsets from its consume queues."""
        store = self.store
        assert self._dispatch is not None
        await self._dispatch.dispatched.wait_reached(store.positions.wrote.value)
        if isinstance(store, TruncatableStore):
            store.take_over()

    def change_role(self, role: BrokerRole) -> None:
        """Record a role change (called by the HA plugin) and notify ``trocket_role_changed``."""
        previous, self.role = self.role, role
        if previous is not role:
            self.ctx.hook.trocket_role_changed(previous=previous, current=role, ctx=self.ctx)

    def statistics(self) -> BrokerStatistics:
        def stats(obj: Any) -> Any:
            return None if obj is None else obj.statistics()

        return BrokerStatistics(
            state=self._state,
            put=stats(self._put),
            dispatch=stats(self._dispatch),
            store=stats(self._store),
            flush=stats(self._flush),
            replicator=stats(self._replicator),
        )
