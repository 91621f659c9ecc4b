"""namesrv: RocketMQ's NameServer as a plugin (routes, broker registry, KV config).

Runs in any process whose ``[broker] roles`` include ``namesrv``; settings in ``[namesrv]``.
Brokers register every 30 s and are dropped after ``broker_expiry`` without a registration,
or at once when their connection closes. Several NameServers run independently; brokers
register with each.
"""

from __future__ import annotations

from kernel import ConfigSection, Phase, ServiceSpec, hookimpl
from kernel.context import BrokerContext, BrokerRuntime, StashKey
from plugins.namesrv.config import NamesrvConfig
from plugins.namesrv.service import NameServer

NAMESRV = StashKey[NameServer]("namesrv.server")
"""The running NameServer of a process (tests and the CLI find its address here)."""


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("namesrv", NamesrvConfig)]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make(runtime: BrokerRuntime) -> NameServer:
        server = NameServer.make(runtime)
        runtime.ctx.stash[NAMESRV] = server
        return server

    return [ServiceSpec("namesrv", Phase.INGRESS, make, roles=frozenset({"namesrv"}))]
