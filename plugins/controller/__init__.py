"""controller: RocketMQ 5's controller mode for automatic failover, with its state in etcd.

Runs in any process whose ``[broker] roles`` include ``controller`` (``trocket controller``), or
in a NameServer process with ``[controller] enable_controller_in_namesrv = true``. Replicas
started with ``[ha] controller_mode = true`` (``enableControllerMode``) register here, heartbeat,
and take the role the controller gives them; see docs/failover.md.
"""

from __future__ import annotations

from kernel import ConfigSection, Phase, ServiceSpec, hookimpl
from kernel.context import BrokerContext, BrokerRuntime, StashKey
from plugins.controller.config import PROPERTIES, ControllerConfig
from plugins.controller.service import ControllerService

CONTROLLER = StashKey[ControllerService]("controller.service")
"""The running controller of a process (tests and the CLI find its address here)."""


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("controller", ControllerConfig, PROPERTIES)]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make(runtime: BrokerRuntime) -> ControllerService:
        service = ControllerService.make(runtime)
        runtime.ctx.stash[CONTROLLER] = service
        return service

    roles = {"controller"}
    if ctx.plugin_config(ControllerConfig).enable_controller_in_namesrv:
        roles.add("namesrv")
    return [ServiceSpec("controller", Phase.INGRESS, make, roles=frozenset(roles))]


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    service = ctx.stash.get(CONTROLLER, None)
    if service is None or service.server is None:
        return {}
    return {
        "controllerAddress": service.address,
        "controllerIsLeader": str(service.is_leader).lower(),
        "controllerElections": str(service.controller.elections),
        "controllerUncleanElections": str(service.controller.unclean_elections),
    }
