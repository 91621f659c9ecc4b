"""pop: RocketMQ 5's POP consumption on the broker.

A POP consumer does not own queues: it asks the broker for messages of its group, and the
broker tracks what it handed out, each batch invisible to other pops until it is acked or
its invisible time passes (then it is delivered again, up to the group's ``retryMaxTimes``,
then dead-lettered). The in-flight state is written to the revive log topic
``rmq_sys_REVIVE_LOG_<cluster>`` through the put pipeline, so it is flushed and replicated
like any message and rebuilt by a restarted broker or a promoted slave.

- request handlers for POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE and
  CHANGE_MESSAGE_INVISIBLETIME (:mod:`plugins.pop.handlers`);
- an INGRESS-phase service answering them and reviving what is due (:mod:`plugins.pop.service`,
  :mod:`plugins.pop.revive`);
- ``trocket_records_dispatched`` wakes pops held waiting for arrivals.

Needs the remoting plugin (topics, groups, offsets: ``kernel.topics``,
``kernel.consumer_progress``). Settings in ``[pop]``; see docs/pop.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernel import ConfigSection, DispatchRecord, Phase, RequestHandlerSpec, ServiceSpec, hookimpl
from kernel.consumer_progress import POP_PROGRESS
from kernel.context import BrokerContext, BrokerRuntime
from kernel.model import BrokerRole
from plugins.pop import handlers
from plugins.pop.config import PROPERTIES, PopConfig
from plugins.pop.service import POP_SERVICE, PopService
from wire.dispatch_batch import queue_keys
from wire.remoting import RequestCode

__all__ = ["POP_SERVICE", "PopConfig", "PopService"]


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("pop", PopConfig, PROPERTIES)]


@hookimpl
def trocket_register_request_handlers(ctx: BrokerContext) -> list[RequestHandlerSpec]:
    return [
        RequestHandlerSpec.connectionless(RequestCode.POP_MESSAGE, "pop", handlers.serve_pop),
        RequestHandlerSpec.connectionless(RequestCode.ACK_MESSAGE, "pop", handlers.serve_ack),
        RequestHandlerSpec.connectionless(RequestCode.BATCH_ACK_MESSAGE, "pop", handlers.serve_batch_ack),
        RequestHandlerSpec.connectionless(
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME, "pop", handlers.serve_change_invisible
        ),
    ]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make(runtime: BrokerRuntime) -> PopService:
        service = PopService(runtime, runtime.ctx.plugin_config(PopConfig))
        runtime.ctx.stash[POP_SERVICE] = service
        runtime.ctx.stash[POP_PROGRESS] = service
        return service

    return [ServiceSpec("pop", Phase.INGRESS, make)]


@hookimpl
def trocket_records_dispatched(records: Sequence[DispatchRecord], ctx: BrokerContext) -> None:
    service = ctx.stash.get(POP_SERVICE, None)
    if service is not None and service.waiting_topics:
        service.notify({topic for topic, _ in queue_keys(records)})


@hookimpl
def trocket_role_changed(previous: BrokerRole, current: BrokerRole, ctx: BrokerContext) -> None:
    service = ctx.stash.get(POP_SERVICE, None)
    if service is not None:
        service.role_changed(current)


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    service = ctx.stash.get(POP_SERVICE, None)
    return service.figures() if service is not None else {}
