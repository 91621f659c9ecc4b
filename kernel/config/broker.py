"""The ``[broker]`` table: identity, roles, plugin list, provider choices and broker-wide limits."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from kernel.config import fields
from kernel.errors import ConfigError
from kernel.model import BrokerRole


@attrs.frozen(kw_only=True)
class PluginDefaults:
    """What a loader fills in for a config file that names no plugins.

    The kernel knows no plugin by name, so the defaults come from whoever assembles the broker:
    Trocket's CLI passes its own (``trocket.cli.defaults``), an application embedding the
    kernel passes its list or none (then a config loads exactly what it names).
    """

    plugins: tuple[str, ...] = ()
    """Loaded when a config names no plugins (only the installed ones; the missing are noted)."""
    flush_plugins: Mapping[str, str] = attrs.field(factory=dict)
    """Flush policy name -> the plugin providing it. A RocketMQ properties file chooses one
    policy (``flushDiskType``); the plugins of the other policies are then left out."""
    replication_plugin: str | None = None
    """Loaded when a properties file names a ``brokerRole`` (a properties file has no plugin
    list; naming a role is asking for RocketMQ's master/slave replication)."""
    replicator: str | None = None
    """The replicator provider selected along with :attr:`replication_plugin`."""
    switches: Mapping[str, str] = attrs.field(factory=dict)
    """Properties key -> the plugin it loads when set to ``true`` (``aclEnable`` -> the ACL
    plugin): RocketMQ turns features on with a flag where a TOML config lists the plugin."""


NO_PLUGIN_DEFAULTS = PluginDefaults()
"""A config loads exactly the plugins it names."""

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
ROLES = ("broker", "namesrv", "controller", "proxy")


def _roles(value: object) -> frozenset[str]:
    if isinstance(value, frozenset):
        return value
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a non-empty list drawn from {list(ROLES)}, got {value!r}")
    unknown = sorted(set(value) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown role(s) {unknown}; expected some of {list(ROLES)}")
    return frozenset(value)


@attrs.frozen(kw_only=True)
class BrokerConfig:
    """Settings of the kernel itself. Plugin settings live in their own tables."""

    roles: frozenset[str] = attrs.field(default=frozenset({"broker"}), converter=_roles)
    """Which servers this process hosts: ``broker``, ``namesrv``, ``controller``, ``proxy`` (RocketMQ
    5's gRPC endpoint, plugin ``proxy``), or several."""
    plugins: tuple[str, ...] = fields.string_list(())
    """Entry-point names or dotted module paths; only these are loaded. Order is irrelevant.
    A file that leaves this out gets its loader's :class:`PluginDefaults`."""
    store: str | None = fields.optional_string("mmap")
    flush: str | None = fields.optional_string("async")
    replicator: str | None = fields.optional_string(None)
    cluster_name: str = fields.string("DefaultCluster")
    broker_name: str = fields.string("broker-a")
    broker_id: int = fields.integer(0, minimum=0)
    broker_role: BrokerRole = fields.enum_value(BrokerRole.ASYNC_MASTER, BrokerRole)
    listen_host: str = fields.string("127.0.0.1")
    listen_port: int = fields.integer(10911, minimum=0, maximum=65535)
    namesrv_addr: tuple[str, ...] = fields.string_list(("127.0.0.1:9876",))
    data_dir: Path = fields.path("data")
    graceful_timeout: float = fields.duration("10s")
    max_message_size: int = fields.size("4MiB", minimum=1)
    default_topic_queue_nums: int = fields.integer(4, minimum=1, maximum=1024)
    auto_create_topic_enable: bool = fields.boolean(True)
    message_delay_level: tuple[float, ...] = fields.delay_levels(DEFAULT_DELAY_LEVELS)
    visible_after_flush: bool = fields.boolean(False)
    """Dispatch to consume queues only up to the flushed position (RocketMQ 5's fix for 8239)."""
    view_persist_interval: float = fields.duration("1s")
    """``flushIntervalConsumeQueue``: how often derived views (consume queues, index, plugin
    views) are asked to persist; a store flushes only views worth flushing then."""
    view_persist_thorough_interval: float = fields.duration("60s")
    """``flushConsumeQueueThoroughInterval``: how often every view is flushed completely and the
    store's checkpoint is written (also at shutdown). Abnormal recovery re-dispatches the log
    written since the last thorough persist."""
    tls_server_mode: str = fields.choice("disabled", ("disabled", "permissive", "enforcing"))
    """``tls.server.mode`` of every port this process listens on (broker, NameServer, HA):
    ``permissive`` serves TLS and plain clients, ``enforcing`` TLS only."""
    tls_server_cert_path: Path | None = fields.path(None)
    """``tls.server.certPath``: the PEM certificate chain (needed unless disabled)."""
    tls_server_key_path: Path | None = fields.path(None)
    """``tls.server.keyPath``: its PEM private key."""
    tls_server_key_password: str | None = fields.optional_string(None)
    tls_server_need_client_auth: str = fields.choice("none", ("none", "optional", "require"))
    """``tls.server.need.client.auth``: ask TLS clients for a certificate."""
    tls_server_trust_cert_path: Path | None = fields.path(None)
    """``tls.server.trustCertPath``: CAs that client certificates must chain to."""
    tls_enable: bool = fields.boolean(False)
    """``tls.enable``: the broker's own connections (to NameServers, a slave's to its master)
    speak TLS."""
    tls_client_auth_server: bool = fields.boolean(False)
    """``tls.client.authServer``: verify the servers' certificates (RocketMQ's default: no)."""
    tls_client_trust_cert_path: Path | None = fields.path(None)
    tls_client_cert_path: Path | None = fields.path(None)
    tls_client_key_path: Path | None = fields.path(None)
    tls_client_key_password: str | None = fields.optional_string(None)
    inner_access_key: str | None = fields.optional_string(None)
    """With :attr:`inner_secret_key`: the ACL account the broker signs its own requests with
    (registration, a slave's metadata sync) when the servers it talks to have ACL on
    (RocketMQ 5's ``innerClientAuthenticationCredentials``)."""
    inner_secret_key: str | None = fields.optional_string(None)


@attrs.frozen(kw_only=True)
class Config:
    """A loaded configuration file: the validated ``[broker]`` table plus raw plugin tables.

    Plugin tables are validated after the plugins are loaded, because the plugins declare their
    schemas (``trocket_config_sections``).
    """

    source: str
    broker: BrokerConfig
    sections: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    notes: tuple[str, ...] = ()
    """Things the loader wants the operator to know (keys for plugins that are not loaded)."""
    problems: tuple[ConfigError, ...] = ()
    """Errors a lenient load set aside (see :func:`kernel.config.toml_file.config_from_tables`);
    plugin-table validation raises them with its own. Always empty for a strict load."""

    def with_broker(self, **changes: Any) -> Config:
        return attrs.evolve(self, broker=attrs.evolve(self.broker, **changes))
