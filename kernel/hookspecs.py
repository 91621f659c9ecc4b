"""Every kernel hook. The docstrings here are the reference manual for plugin authors.

Rules that hold for all of them:

* Hooks are **synchronous and never block**: they configure, register providers, decide and
  notify. Work that waits (I/O, timers) lives in ``async`` methods of objects a hook returned.
  pluggy has no async support; an ``async def`` hookimpl returns a coroutine, which silently
  stops a ``firstresult`` chain.
* Hooks run at assembly time or once per batch, never once per message.
* Call with keyword arguments; an implementation may accept any subset of the arguments.
* ``ctx`` is the per-broker :class:`kernel.context.BrokerContext`; there is no module state.

Each spec ends with a trailer: *Firstresult* (whether the first non-None answer ends the call),
*Colour* (in trio's sense: whether the hook may wait, always "sync" here, and when it runs:
assembly time, once per batch, or on an event) and *Since* (the version that added it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

from kernel.plugin import hookspec

if TYPE_CHECKING:
    from kernel.config import BrokerConfig
    from kernel.context import BrokerContext
    from kernel.model import (
        AllocateStrategy,
        BrokerRole,
        ConfigSection,
        DispatchRecord,
        FlushPolicyProvider,
        MessageBatch,
        PutResult,
        RecoveryReport,
        Redelivery,
        Rejection,
        ReplicatorProvider,
        RequestGuardSpec,
        RequestHandlerSpec,
        ServiceSpec,
        StoreProvider,
    )
    from kernel.protocols import Dispatcher, MessageStore


# --------------------------------------------------------------------------------------------
# Bootstrap
# --------------------------------------------------------------------------------------------


@hookspec(historic=True)
def trocket_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add a plugin's own hook specifications.

    Called when the plugin is registered. A plugin that lets *other* plugins extend it (for
    example an exporter's per-row hook) calls ``pluginmanager.add_hookspecs(module)`` here.
    Implementers of such plugin-owned hooks must mark them ``optionalhook=True`` so brokers
    without the owning plugin still start.

    :param pluginmanager: the broker's ``pluggy.PluginManager``.

    Firstresult: no (historic: plugins registered later are called too).
    Colour: sync; assembly time.
    Since: 0.1
    """


@hookspec
def trocket_config_sections() -> Iterable[ConfigSection]:
    """Declare the plugin's configuration tables.

    Called once after the plugins are loaded and before the config file's tables are
    validated. Each :class:`~kernel.model.ConfigSection` names a TOML table and the
    ``attrs`` class its keys are validated into (unknown keys and bad values become a
    :class:`~kernel.errors.ConfigError` naming the file and key). Read the validated object
    with ``ctx.plugin_config(YourConfig)``.

    :returns: the sections this plugin owns.

    Firstresult: no (results from every plugin are collected).
    Colour: sync; assembly time.
    Since: 0.1
    """


@hookspec
def trocket_configure(config: BrokerConfig, ctx: BrokerContext) -> None:
    """Check the assembled configuration across plugins; raise ``ConfigError`` to refuse it.

    Called once, after every section validated and the context exists, before any provider is
    created. Use it for cross-section rules (a sync master needs a replicator, ...).

    :param config: the whole broker configuration.
    :param ctx: the broker context (plugin configs are available).

    Firstresult: no.
    Colour: sync; assembly time; no I/O.
    Since: 0.1
    """


# --------------------------------------------------------------------------------------------
# Providers (single-provider roles are selected by name in [broker])
# --------------------------------------------------------------------------------------------


@hookspec
def trocket_register_stores() -> Iterable[StoreProvider]:
    """Offer message store implementations.

    The broker uses the one named by ``[broker] store``; if the key is omitted and exactly
    one store is offered, that one. Names are unique across plugins.

    :returns: :class:`~kernel.model.StoreProvider` records.

    Firstresult: no.
    Colour: sync; assembly time.
    Since: 0.1
    """


@hookspec
def trocket_register_flush_policies() -> Iterable[FlushPolicyProvider]:
    """Offer flush policies (``"sync"`` group commit, ``"async"`` interval flush, ...).

    Selected by ``[broker] flush`` (or ``flushDiskType`` in a properties file).

    :returns: :class:`~kernel.model.FlushPolicyProvider` records.

    Firstresult: no.
    Colour: sync; assembly time.
    Since: 0.1
    """


@hookspec
def trocket_register_replicators() -> Iterable[ReplicatorProvider]:
    """Offer replication roles (master/slave). No replicator means a standalone broker.

    :returns: :class:`~kernel.model.ReplicatorProvider` records.

    Firstresult: no.
    Colour: sync; assembly time.
    Since: 0.1
    """


@hookspec
def trocket_register_allocate_strategies() -> Iterable[AllocateStrategy]:
    """Offer consumer queue-allocation strategies, selected by name per consumer group.

    :returns: :class:`~kernel.model.AllocateStrategy` records (pure functions).

    Firstresult: no.
    Colour: sync; assembly time.
    Since: 0.1
    """


@hookspec
def trocket_register_parking_topics() -> Iterable[str]:
    """Name the topics this plugin parks messages in until they are due (a delay plugin's
    ``SCHEDULE_TOPIC_XXXX``).

    Their consume-queue tag field holds each message's due time (the ``TIMER_OUT_MS``
    property, ms) instead of its tag's hash, as RocketMQ's schedule topic does, so a scheduler
    finds due messages from the queue alone. Collected once into
    :attr:`~kernel.context.BrokerContext.parking_topics`; a message asking for a delay that is
    put anywhere else was parked by no plugin and is refused.

    :returns: topic names.

    Firstresult: no.
    Colour: sync; assembly time.
    Since: 0.1
    """


@hookspec
def trocket_register_dispatchers(ctx: BrokerContext, store: MessageStore) -> Iterable[Dispatcher]:
    """Add derived views fed by the ordered dispatch loop (schedule queues, exports, ...).

    Called after the store recovered. Dispatch resumes from the lowest
    ``dispatched_offset()`` of all dispatchers, so a new view is rebuilt from the log.

    :param ctx: the broker context.
    :param store: the opened store (read it, do not append from here).
    :returns: objects implementing :class:`~kernel.protocols.Dispatcher`.

    Firstresult: no.
    Colour: sync; assembly time.
    Since: 0.1
    """


@hookspec
def trocket_register_services(ctx: BrokerContext) -> Iterable[ServiceSpec]:
    """Add long-running services, each started in its lifecycle phase.

    :param ctx: the broker context.
    :returns: :class:`~kernel.model.ServiceSpec` records.

    Firstresult: no.
    Colour: sync; assembly time. The services' ``run`` methods are async.
    Since: 0.1
    """


@hookspec
def trocket_register_request_handlers(ctx: BrokerContext) -> Iterable[RequestHandlerSpec]:
    """Answer remoting request codes on the broker's port that the serving plugin does not.

    The plugin serving the port (``remoting``) collects these when it starts listening and
    routes each code to its handler; a code it handles itself, or that two plugins claim, stops
    the broker at start with an error naming both. Handlers reach their plugin's state through
    ``runtime.ctx.stash``; to call a client back, see :data:`kernel.clients.CLIENT_DIRECTORY`.

    :param ctx: the broker context.
    :returns: :class:`~kernel.model.RequestHandlerSpec` records.

    Firstresult: no.
    Colour: sync; assembly time (when the port opens). The handlers are async.
    Since: 0.1
    """


@hookspec
def trocket_register_request_guards(ctx: BrokerContext) -> Iterable[RequestGuardSpec]:
    """Check every request on the broker's port before its handler runs (access control).

    The plugin serving the port collects these when it starts listening; each request of a
    code the broker answers passes every guard in plugin order, and the first refusal is the
    answer (a oneway request refused is dropped). A guard's ``check`` is a plain function
    called once per request, never through pluggy.

    :param ctx: the broker context.
    :returns: :class:`~kernel.model.RequestGuardSpec` records.

    Firstresult: no.
    Colour: sync; assembly time (when the port opens). The checks are sync, once per request.
    Since: 0.2
    """


# --------------------------------------------------------------------------------------------
# Data path (once per batch, O(1) per message, no I/O)
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def trocket_before_append(batch: MessageBatch, ctx: BrokerContext) -> Rejection | None:
    """Inspect, rewrite or refuse a batch before it is appended to the commit log.

    Called once per batch by the put pipeline. Implementations may mutate the messages (a
    delayed message rewritten to the schedule topic) and return ``None`` to let the batch
    continue, or return a :class:`~kernel.model.Rejection` to refuse the whole batch.

    :param batch: the batch; its messages are mutable.
    :param ctx: the broker context.
    :returns: a rejection, or ``None``.

    Firstresult: stops at the first non-None result.
    Colour: sync; on the event loop for every batch; no I/O.
    Since: 0.1
    """


@hookspec
def trocket_after_put(batch: MessageBatch, result: PutResult, ctx: BrokerContext) -> None:
    """Observe a finished put (status final: flushed/replicated or timed out, or rejected).

    :param batch: the batch as appended (after any rewrite).
    :param result: the final :class:`~kernel.model.PutResult`.
    :param ctx: the broker context.

    Firstresult: no.
    Colour: sync; once per batch; no I/O (hand work to a service through a bounded channel).
    Since: 0.1
    """


@hookspec
def trocket_messages_pulled(topic: str, group: str, count: int, size: int, ctx: BrokerContext) -> None:
    """Observe a pull answered with messages (what consumers read: metrics, audits).

    :param topic: the topic pulled.
    :param group: the consumer group that pulled.
    :param count: messages in the answer.
    :param size: their stored bytes.
    :param ctx: the broker context.

    Firstresult: no.
    Colour: sync; once per pull answer, never per message; no I/O.
    Since: 0.1
    """


@hookspec
def trocket_records_dispatched(records: Sequence[DispatchRecord], ctx: BrokerContext) -> None:
    """Observe a batch of records that reached the derived views (consume queues, index).

    Lets a plugin react to newly visible messages (wake long-polling pulls, metrics) without a
    dispatcher of its own.

    :param records: the dispatched records, in log order. From the built-in store this is a
        :class:`wire.dispatch_batch.DispatchBatch`: its columns (and ``queue_keys()``) cost
        nothing, while each record read from it is built on access, so prefer the columns.
    :param ctx: the broker context.

    Firstresult: no.
    Colour: sync; once per dispatch batch; no I/O.
    Since: 0.1
    """


# --------------------------------------------------------------------------------------------
# Lifecycle
# --------------------------------------------------------------------------------------------


@hookspec
def trocket_store_recovered(report: RecoveryReport, ctx: BrokerContext) -> None:
    """The store finished recovery; nothing has been appended yet.

    :param report: what recovery found and did.
    :param ctx: the broker context.

    Firstresult: no.
    Colour: sync.
    Since: 0.1
    """


@hookspec
def trocket_role_changed(previous: BrokerRole, current: BrokerRole, ctx: BrokerContext) -> None:
    """The broker's role changed (a slave promoted, a master demoted).

    :param previous: the role before.
    :param current: the role now.
    :param ctx: the broker context.

    Firstresult: no.
    Colour: sync.
    Since: 0.1
    """


@hookspec
def trocket_broker_ready(ctx: BrokerContext) -> None:
    """Every service of every phase reported started; the broker accepts traffic.

    :param ctx: the broker context.

    Firstresult: no.
    Colour: sync.
    Since: 0.1
    """


@hookspec
def trocket_broker_stopping(ctx: BrokerContext, reason: str) -> None:
    """A graceful shutdown began; ingress stops next, then the inner phases drain.

    :param ctx: the broker context.
    :param reason: why (``"SIGTERM"``, ``"requested"``, ...).

    Firstresult: no.
    Colour: sync.
    Since: 0.1
    """


@hookspec
def trocket_runtime_figures(ctx: BrokerContext) -> Mapping[str, str]:
    """Figures a plugin adds to the broker's runtime info (``GET_BROKER_RUNTIME_INFO``, shown by
    ``trocket admin brokerStatus``), for example a scheduler's progress.

    Use RocketMQ's key names where one exists (``scheduleMessageOffset_<level>``), so tools
    written for RocketMQ read them; keys must not clash with the broker's own.

    :param ctx: the broker context.
    :returns: key to value, both strings.

    Firstresult: no; the mappings are merged.
    Colour: sync; called per request; cheap reads only.
    Since: 0.1
    """


# --------------------------------------------------------------------------------------------
# Retry / delay / dead letter
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def trocket_redelivery_decision(
    message: DispatchRecord, group: str, attempt: int, max_attempts: int, ctx: BrokerContext
) -> Redelivery | None:
    """Decide what happens to a message a consumer group sent back.

    ``retry_dlq`` registers the default (RocketMQ's schedule: delay level ``3 + reconsumeTimes``,
    dead letter once ``attempt`` exceeds ``max_attempts``) with ``trylast=True``; register
    ``tryfirst=True`` to override it for some groups and return ``None`` for the rest. The
    network layer decides dead letter itself beyond ``max_attempts`` or when the client asks
    for it (delay level < 0), as RocketMQ does.

    :param message: the message being sent back.
    :param group: the consumer group.
    :param attempt: failed consumptions including this one (RocketMQ's reconsume times + 1).
    :param max_attempts: the group's ``maxReconsumeTimes``.
    :param ctx: the broker context.
    :returns: :class:`~kernel.model.Redelivery`, or ``None`` to defer.

    Firstresult: stops at the first non-None result.
    Colour: sync; once per send-back; no I/O.
    Since: 0.1
    """


@hookspec
def trocket_dead_lettered(message: DispatchRecord, group: str, reason: str, ctx: BrokerContext) -> None:
    """A message was moved to ``%DLQ%<group>``.

    :param message: the message.
    :param group: the consumer group.
    :param reason: why (``"max reconsume times reached"``, ...).
    :param ctx: the broker context.

    Firstresult: no.
    Colour: sync.
    Since: 0.1
    """
