"""proxy: RocketMQ 5's gRPC endpoint (``apache.rocketmq.v2.MessagingService``) for the 5.x clients.

Every maintained RocketMQ client (Java, Go, C#, Rust, Python, Node.js 5.x) talks gRPC to a
"proxy" and consumes by POP. This plugin is that proxy: a grpcio server (:mod:`.completion_queue_host`)
whose calls become remoting requests to the brokers the NameServers name (sends, POP, acks,
transaction ends), with the settings handshake, routes, server-side auto-renewal and
transaction check-backs the clients rely on. It serves the ``proxy`` role: beside a broker
(``trocket up`` serves 127.0.0.1:8081, RocketMQ's proxy port) or alone (``trocket proxy``).
Settings in ``[proxy]``; see docs/proxy.md.
"""

from __future__ import annotations

from kernel import ConfigSection, Phase, ServiceSpec, hookimpl
from kernel.context import BrokerContext, BrokerRuntime
from plugins.proxy.config import ProxyConfig
from plugins.proxy.service import PROXY, ProxyService

__all__ = ["PROXY", "ProxyConfig", "ProxyService"]


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("proxy", ProxyConfig)]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make(runtime: BrokerRuntime) -> ProxyService:
        service = ProxyService(runtime, runtime.ctx.plugin_config(ProxyConfig))
        runtime.ctx.stash[PROXY] = service
        return service

    return [ServiceSpec("proxy", Phase.INGRESS, make, roles=frozenset({"proxy"}))]


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    service = ctx.stash.get(PROXY, None)
    return service.figures() if service is not None else {}
