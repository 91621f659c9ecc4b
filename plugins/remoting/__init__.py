"""remoting: the broker's network ingress, speaking RocketMQ 4.x's remoting protocol.

Serves producers, consumers and admin tools on ``[broker] listen_host:listen_port``,
registers with every NameServer in ``[broker] namesrv_addr``, and keeps the broker's
``config/topics.json``, ``subscriptionGroup.json`` and ``consumerOffset.json``. Settings in
``[remoting]``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernel import ConfigSection, DispatchRecord, Phase, ServiceSpec, hookimpl
from kernel.clients import CLIENT_DIRECTORY
from kernel.consumer_progress import CONSUMER_OFFSETS, CONSUMER_PROGRESS
from kernel.context import BrokerContext, BrokerRuntime
from kernel.model import BrokerRole
from kernel.topics import TOPIC_DIRECTORY
from plugins.remoting.config import PROPERTIES, RemotingConfig
from plugins.remoting.service import NETWORK, BrokerNetwork
from wire.dispatch_batch import queue_keys

__all__ = ["NETWORK", "BrokerNetwork", "RemotingConfig"]


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("remoting", RemotingConfig, PROPERTIES)]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make(runtime: BrokerRuntime) -> BrokerNetwork:
        network = BrokerNetwork.make(runtime)
        runtime.ctx.stash[NETWORK] = network
        runtime.ctx.stash[CLIENT_DIRECTORY] = network.clients
        runtime.ctx.stash[TOPIC_DIRECTORY] = network
        runtime.ctx.stash[CONSUMER_PROGRESS] = network
        runtime.ctx.stash[CONSUMER_OFFSETS] = network
        return network

    return [ServiceSpec("remoting", Phase.INGRESS, make)]


@hookimpl
def trocket_role_changed(previous: BrokerRole, current: BrokerRole, ctx: BrokerContext) -> None:
    """A replica promoted or demoted (controller mode): register with the NameServers at once
    under the id of the new role (0 for the master), so clients' routes follow."""
    network = ctx.stash.get(NETWORK, None)
    if network is not None:
        network.role_changed(current)


@hookimpl
def trocket_records_dispatched(records: Sequence[DispatchRecord], ctx: BrokerContext) -> None:
    network = ctx.stash.get(NETWORK, None)
    if network is None:
        return
    queues = queue_keys(records)
    if network.waiters.waiting_queues():
        network.waiters.notify(queues)
    if network.is_slave:
        network.learn_topics(queues)
