"""acl plugin: RocketMQ's plain ACL (``aclEnable=true``). Every request on the broker's port
must be signed by an account of ``plain_acl.yml`` that has the permission it needs.

Hooks:

- ``trocket_register_request_guards``: :class:`~plugins.acl.guard.AclGuard` checks each
  request before its handler (see that module for the rules and their order);
- ``trocket_register_services``: :class:`~plugins.acl.watcher.AclFileWatcher` re-reads the
  file when it changes;
- ``trocket_register_request_handlers``: the ACL admin requests (``updateAclConfig``, ...),
  written to the file (:mod:`plugins.acl.admin_requests`, :mod:`plugins.acl.editing`);
- ``trocket_runtime_figures``: ``acl*`` lines in ``brokerStatus``.
"""

from __future__ import annotations

from pathlib import Path

from kernel import ConfigSection, Phase, RequestGuardSpec, RequestHandlerSpec, ServiceSpec, hookimpl
from kernel.access import ACCESS_CONTROL
from kernel.context import BrokerContext, BrokerRuntime, StashKey
from kernel.errors import ConfigError
from plugins.acl import admin_requests
from plugins.acl.admin_requests import ACL_EDITOR
from plugins.acl.config import PROPERTIES, AclConfig
from plugins.acl.editing import AclFileEditor
from plugins.acl.guard import AclGuard
from plugins.acl.plain_acl import AclFileError, read_plain_acl
from plugins.acl.watcher import AclFileWatcher
from wire.remoting import RequestCode

__all__ = ["ACL_GUARD", "AclConfig", "AclGuard", "acl_file"]

ACL_GUARD = StashKey[AclGuard]("acl.guard")
ACL_WATCHER = StashKey[AclFileWatcher]("acl.watcher")
DEFAULT_FILE = "plain_acl.yml"


def acl_file(ctx: BrokerContext) -> Path:
    """The ACL file: ``[acl] plain_acl_file``, else ``plain_acl.yml`` beside the config file
    (relative paths are taken from the config file's directory)."""
    source = ctx.config.source
    base = Path(source).parent if not source.startswith("<") else Path.cwd()
    named = ctx.plugin_config(AclConfig).plain_acl_file
    path = Path(named).expanduser() if named else Path(DEFAULT_FILE)
    return path if path.is_absolute() else base / path


def _guard(ctx: BrokerContext) -> AclGuard:
    """The guard, reading the file the first time (a broker with ACL on and no usable file
    does not start)."""
    guard = ctx.stash.get(ACL_GUARD, None)
    if guard is None:
        path = acl_file(ctx)
        try:
            guard = AclGuard(read_plain_acl(path))
        except AclFileError as error:
            raise ConfigError(str(path), None, f"ACL is on and its file cannot be used: {error}") from None
        ctx.stash[ACL_GUARD] = guard
        ctx.stash[ACL_EDITOR] = AclFileEditor(path, guard)
    return guard


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("acl", AclConfig, PROPERTIES)]


@hookimpl
def trocket_register_request_guards(ctx: BrokerContext) -> list[RequestGuardSpec]:
    return [RequestGuardSpec("acl", _guard(ctx).check)]


@hookimpl
def trocket_register_request_handlers(ctx: BrokerContext) -> list[RequestHandlerSpec]:
    return [
        RequestHandlerSpec(
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, "acl", admin_requests.handle_update_account
        ),
        RequestHandlerSpec(RequestCode.DELETE_ACL_CONFIG, "acl", admin_requests.handle_delete_account),
        RequestHandlerSpec(
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, "acl", admin_requests.handle_update_global_white
        ),
        RequestHandlerSpec(RequestCode.GET_BROKER_CLUSTER_ACL_INFO, "acl", admin_requests.handle_acl_info),
    ]


@hookimpl
def trocket_register_services(ctx: BrokerContext) -> list[ServiceSpec]:
    def make(runtime: BrokerRuntime) -> AclFileWatcher:
        watcher = AclFileWatcher(
            acl_file(runtime.ctx), _guard(runtime.ctx), runtime.ctx.plugin_config(AclConfig).reload_interval
        )
        runtime.ctx.stash[ACL_WATCHER] = watcher
        runtime.ctx.stash[ACCESS_CONTROL] = _guard(runtime.ctx)
        return watcher

    # A proxy-only process checks gRPC calls against the same file, re-read the same way.
    return [ServiceSpec("acl-file-watcher", Phase.DURABILITY, make, roles=frozenset({"broker", "proxy"}))]


@hookimpl
def trocket_runtime_figures(ctx: BrokerContext) -> dict[str, str]:
    watcher = ctx.stash.get(ACL_WATCHER, None)
    return watcher.figures() if watcher is not None else {}
