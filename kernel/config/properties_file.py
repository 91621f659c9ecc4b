"""Accept a RocketMQ ``broker.properties`` file and map it onto the native model.

Each supported key has a target (table and key) and a converter from RocketMQ's own units
(milliseconds, hours, bytes) to ours, declared by the table's owner: the ``[broker]`` keys
here, each plugin's keys with its :class:`~kernel.model.ConfigSection` (this loader asks every
installed plugin). Values are checked here, so a bad value is reported with the properties key
even when its plugin is not loaded. Keys RocketMQ defines that nothing here uses are ignored
with a note; other unknown keys are errors.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from kernel.config import property_aliases as rocketmq
from kernel.config.broker import NO_PLUGIN_DEFAULTS, Config, PluginDefaults
from kernel.config.property_aliases import PropertyAlias
from kernel.config.rocketmq_keys import ROCKETMQ_KEYS
from kernel.config.text import read_config_text
from kernel.config.toml_file import config_from_tables
from kernel.errors import ConfigError, ConfigErrors, PluginLoadError
from kernel.plugin import available_plugins, resolve_plugin


def _flush_disk_type(value: str) -> str:
    mapping = {"ASYNC_FLUSH": "async", "SYNC_FLUSH": "sync"}
    if value not in mapping:
        raise ValueError(f"expected ASYNC_FLUSH or SYNC_FLUSH, got {value!r}")
    return mapping[value]


def _broker_role(value: str) -> str:
    if value not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
        raise ValueError(f"expected ASYNC_MASTER, SYNC_MASTER or SLAVE, got {value!r}")
    return value


BROKER_PROPERTIES: dict[str, PropertyAlias] = {
    "brokerClusterName": PropertyAlias("cluster_name", rocketmq.text, "a cluster name"),
    "brokerName": PropertyAlias("broker_name", rocketmq.text, "a broker name"),
    "brokerId": rocketmq.integer_alias("broker_id", "0 for a master, >0 for a slave"),
    "listenPort": rocketmq.integer_alias("listen_port", "a TCP port"),
    "namesrvAddr": PropertyAlias("namesrv_addr", rocketmq.addresses, "host:port;host:port"),
    "brokerRole": PropertyAlias("broker_role", _broker_role, "ASYNC_MASTER|SYNC_MASTER|SLAVE"),
    "flushDiskType": PropertyAlias("flush", _flush_disk_type, "ASYNC_FLUSH|SYNC_FLUSH"),
    "storePathRootDir": PropertyAlias("data_dir", rocketmq.text, "a directory"),
    "maxMessageSize": rocketmq.integer_alias("max_message_size", "bytes"),
    "messageDelayLevel": PropertyAlias("message_delay_level", rocketmq.text, "'1s 5s ... 2h'"),
    "defaultTopicQueueNums": rocketmq.integer_alias("default_topic_queue_nums", "a count"),
    "autoCreateTopicEnable": rocketmq.boolean_alias("auto_create_topic_enable"),
    "flushIntervalConsumeQueue": rocketmq.milliseconds_alias("view_persist_interval"),
    "flushConsumeQueueThoroughInterval": rocketmq.milliseconds_alias("view_persist_thorough_interval"),
    "brokerIP1": PropertyAlias("listen_host", rocketmq.text, "the address clients reach"),
    "tls.server.mode": PropertyAlias("tls_server_mode", rocketmq.text, "disabled|permissive|enforcing"),
    "tls.server.certPath": PropertyAlias("tls_server_cert_path", rocketmq.text, "a PEM file"),
    "tls.server.keyPath": PropertyAlias("tls_server_key_path", rocketmq.text, "a PEM file"),
    "tls.server.keyPassword": PropertyAlias("tls_server_key_password", rocketmq.text, "a password"),
    "tls.server.need.client.auth": PropertyAlias(
        "tls_server_need_client_auth", rocketmq.text, "none|optional|require"
    ),
    "tls.server.trustCertPath": PropertyAlias("tls_server_trust_cert_path", rocketmq.text, "a PEM file"),
    "tls.enable": rocketmq.boolean_alias("tls_enable"),
    "tls.client.authServer": rocketmq.boolean_alias("tls_client_auth_server"),
    "tls.client.trustCertPath": PropertyAlias("tls_client_trust_cert_path", rocketmq.text, "a PEM file"),
    "tls.client.certPath": PropertyAlias("tls_client_cert_path", rocketmq.text, "a PEM file"),
    "tls.client.keyPath": PropertyAlias("tls_client_key_path", rocketmq.text, "a PEM file"),
    "tls.client.keyPassword": PropertyAlias("tls_client_key_password", rocketmq.text, "a password"),
}
"""The RocketMQ keys of the kernel's ``[broker]`` table. Plugins declare theirs with their
table (:class:`~kernel.model.ConfigSection`)."""


@attrs.frozen
class PropertyTarget:
    """Where a RocketMQ key lands: a table and how."""

    section: str
    alias: PropertyAlias


def declared_properties(plugins: Iterable[str]) -> tuple[dict[str, list[PropertyTarget]], list[str]]:
    """Every RocketMQ key the ``[broker]`` table and the tables of ``plugins`` declare (a key
    may land in several tables: ``syncFlushTimeout``), and notes on plugins that could not be
    imported to ask (their keys then count as unknown)."""
    targets: dict[str, list[PropertyTarget]] = {}
    notes: list[str] = []
    for key, alias in BROKER_PROPERTIES.items():
        targets.setdefault(key, []).append(PropertyTarget("broker", alias))
    for name in plugins:
        try:
            plugin = resolve_plugin(name)
        except PluginLoadError as error:
            notes.append(f"plugin {name!r} could not be imported to read its broker.properties keys: {error}")
            continue
        declare = getattr(plugin, "trocket_config_sections", None)
        for section in declare() if callable(declare) else ():
            for key, alias in section.properties.items():
                targets.setdefault(key, []).append(PropertyTarget(section.name, alias))
    return targets, notes


def parse_properties(text: str, *, source: str) -> dict[str, str]:
    """Parse Java-style ``key=value`` lines (``#``/``!`` comments, ``\\`` continuations)."""
    result: dict[str, str] = {}
    logical = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not logical and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            logical += stripped[:-1]
            continue
        logical += stripped
        key, sep, value = _split_assignment(logical)
        if not sep:
            raise ConfigError(source, f"line {number}", f"expected key=value, got {logical!r}")
        if key in result:
            raise ConfigError(source, key, f"set twice (line {number})")
        result[key] = value
        logical = ""
    return result


def _split_assignment(line: str) -> tuple[str, str, str]:
    for index, char in enumerate(line):
        if char in "=:":
            return line[:index].strip(), char, line[index + 1 :].strip()
    return line, "", ""


def _unknown_key(key: str, supported_keys: Iterable[str]) -> str:
    """An error for a key neither Trocket nor RocketMQ defines, with the closest names."""
    supported = sorted(supported_keys)
    close = difflib.get_close_matches(key, sorted({*supported, *ROCKETMQ_KEYS}), n=3, cutoff=0.75)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return (
        f"unknown key (neither Trocket nor RocketMQ defines it); {hint}supported keys: {', '.join(supported)}"
    )


def load_properties(
    path: Path, *, lenient: bool = False, defaults: PluginDefaults = NO_PLUGIN_DEFAULTS
) -> Config:
    """Map a RocketMQ ``broker.properties`` file onto :class:`Config`.

    A properties file has no plugin list: the plugins are ``defaults.plugins``, less the flush
    plugins of the policies ``flushDiskType`` did not choose, plus the replication plugin when
    the file names a ``brokerRole``, plus the plugins of ``defaults.switches`` keys set to
    ``true`` (``aclEnable``).

    :raises ConfigError: unknown key, bad value, or unreadable file; naming file and key.
    """
    source = str(path)
    props = parse_properties(read_config_text(path), source=source)
    tables: dict[str, dict[str, Any]] = {"broker": {}}
    errors: list[ConfigError] = []
    ignored: list[str] = []
    installed = available_plugins()
    declared, import_notes = declared_properties(installed)
    switched: list[str] = []
    for key, raw in props.items():
        if key in defaults.switches:
            try:
                if rocketmq.boolean(raw):
                    switched.append(defaults.switches[key])
            except ValueError as error:
                errors.append(ConfigError(source, key, f"{error} (expected true|false)"))
            continue
        targets = declared.get(key)
        if targets is None and key in ROCKETMQ_KEYS:
            ignored.append(key)  # a RocketMQ setting Trocket has no use for: start anyway
            continue
        if targets is None:
            errors.append(ConfigError(source, key, _unknown_key(key, declared)))
            continue
        for target in targets:
            try:
                value = target.alias.convert(raw)
            except ValueError as error:
                errors.append(ConfigError(source, key, f"{error} (expected {target.alias.expected})"))
                break
            tables.setdefault(target.section, {})[target.alias.key] = value
    if not lenient:
        ConfigErrors.raise_any(errors)
    flush = tables["broker"].get("flush", "async")
    others = [plugin for policy, plugin in defaults.flush_plugins.items() if policy != flush]
    wanted = [p for p in defaults.plugins if p not in others]
    if "broker_role" in tables["broker"] and defaults.replication_plugin:
        wanted.append(defaults.replication_plugin)
        if defaults.replicator:
            tables["broker"].setdefault("replicator", defaults.replicator)
    wanted += [plugin for plugin in switched if plugin not in wanted]
    plugins = [p for p in wanted if p in installed]
    missing = [p for p in wanted if p not in installed]
    tables["broker"]["plugins"] = plugins
    config = config_from_tables(tables, source=source, lenient=lenient)
    # Properties name the role's settings for every policy (RocketMQ files list both flush
    # kinds); settings for plugins this broker does not load are reported, not fatal.
    notes = [f"{key}: a RocketMQ setting Trocket does not use; ignored" for key in ignored]
    notes += import_notes
    if missing:
        notes.append(
            f"plugins this file implies are not installed (not part of this build yet): {', '.join(missing)}"
        )
    kept: dict[str, dict[str, Any]] = {}
    for section, values in config.sections.items():
        if section in plugins:
            kept[section] = values
        else:
            keys = ", ".join(
                key
                for key, targets in declared.items()
                if key in props and any(t.section == section and t.alias.key in values for t in targets)
            )
            notes.append(f"{keys}: applies to plugin {section!r}, which this broker does not load")
    return attrs.evolve(config, sections=kept, notes=tuple(notes), problems=(*errors, *config.problems))
