"""console plugin: a web console in the spirit of RocketMQ Dashboard (cluster, topics, consumer
groups, messages, dead letters, schedule progress, a live chart of TPS and lag).

It talks to the cluster only through the admin client, like ``trocket admin``, so the same
console runs inside a broker process (this plugin's service, on ``[console] host:port``,
default 127.0.0.1:8080) or on its own (``trocket console -n host:port``) against any cluster.

Hooks:

- ``trocket_config_sections``: ``[console]`` (:class:`~plugins.console.config.ConsoleConfig`);
- ``trocket_register_services``: the console's HTTP server, on the broker's trio loop;
- ``trocket_runtime_figures``: ``consoleUrl`` in ``brokerStatus`` (``trocket up`` prints it).

Pages and API: ``docs/console.md``.
"""

from __future__ import annotations

from kernel import ConfigSection, Phase, ServiceSpec, hookimpl
from kernel.context import BrokerContext, BrokerRuntime, StashKey
from plugins.console.config import ConsoleConfig
from plugins.console.server import ConsoleServer

__all__ = ["CONSOLE", "ConsoleConfig", "ConsoleServer"]

CONSOLE = StashKey[ConsoleServer]("console.server")


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("console", ConsoleConfig)]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make(runtime: BrokerRuntime) -> ConsoleServer:
        config = runtime.ctx.plugin_config(ConsoleConfig)
        watched = config.namesrv_addr or tuple(runtime.ctx.broker.namesrv_addr)
        server = ConsoleServer(watched, config.host, config.port, max_body=config.max_body)
        runtime.ctx.stash[CONSOLE] = server
        return server

    return [ServiceSpec("console", Phase.EXPORT, make, roles=frozenset({"broker", "namesrv"}))]


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    server = ctx.stash.get(CONSOLE, None)
    return {"consoleUrl": server.url} if server is not None and server.url else {}
