"""Shared by the CLI commands: config loading with overrides, and readable summaries."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from kernel import Broker, Config, default_config, load_config
from kernel.config import unstructure
from kernel.config.toml_file import config_from_tables
from trocket.cli.defaults import TROCKET_DEFAULTS

EMBEDDED_TABLES: dict[str, dict[str, Any]] = {
    "store_mmap": {
        "commit_log_file_size": "64MiB",
        "consume_queue_file_size": 30_000 * 20,
        "index_hash_slots": 100_000,
        "index_max_entries": 400_000,
    }
}
"""What ``trocket up`` without ``-c`` changes from RocketMQ's sizes: a newcomer's first start
allocates about 72 MiB instead of 1.4 GiB (1 GiB commit-log file, 400 MiB index file, 5.7 MiB
per consume queue). A config file keeps RocketMQ's sizes unless it sets its own."""


def embedded(*, tables: dict[str, dict[str, Any]] | None = None, **overrides: Any) -> Config:
    """The embedded default of ``trocket up``: built-in config, smaller files (``tables``: more
    plugin tables; ``overrides``: ``[broker]`` keys)."""
    tables = {name: dict(values) for name, values in {**EMBEDDED_TABLES, **(tables or {})}.items()}
    tables["broker"] = {k: v for k, v in overrides.items() if v is not None}
    if "data_dir" in tables["broker"]:
        tables["broker"]["data_dir"] = str(tables["broker"]["data_dir"])

    return config_from_tables(tables, source="<embedded default>", defaults=TROCKET_DEFAULTS)


def load(config_path: str | None, *, lenient: bool = False, **overrides: Any) -> Config:
    """The file's config (or the built-in defaults) with ``[broker]`` overrides applied
    (``lenient``: bad ``[broker]`` keys are reported with the plugin tables' problems)."""
    if config_path:
        config = load_config(Path(config_path), lenient=lenient, defaults=TROCKET_DEFAULTS)
    else:
        config = default_config(TROCKET_DEFAULTS)
    changes = {k: v for k, v in overrides.items() if v is not None}

    return config.with_broker(**changes) if changes else config


def codec_text() -> str:
    """Which batch codec encodes and decodes records: the compiled extension, or the pure-Python
    fallback (same answers, slower) when it was not built or ``TROCKET_PURE_CODEC`` is set."""
    from wire.batch_codec import ACCELERATED

    return "compiled" if ACCELERATED else "pure Python (TROCKET_PURE_CODEC, or not built)"


def describe_broker(broker: Broker) -> list[str]:
    """What a newcomer needs to see: roles, plugins, chosen providers and their settings."""
    cfg = broker.config.broker
    lines = [f"config: {broker.config.source}", f"roles: {', '.join(sorted(cfg.roles))}"]
    lines.append(f"plugins: {', '.join(broker.host.names) or 'none'}")
    if "broker" in cfg.roles:
        store = broker.host.select("store", broker.host.stores(), cfg.store)
        flush = broker.host.select("flush", broker.host.flush_policies(), cfg.flush)
        lines.append(
            f"broker: {cfg.cluster_name}/{cfg.broker_name} id={cfg.broker_id} role={cfg.broker_role.value}"
        )
        lines.append(f"data dir: {cfg.data_dir.resolve()}")
        lines.append(f"store: {store.name} ({store.description})")
        if store.settings:
            lines.append("disk: " + ", ".join(f"{k} {v}" for k, v in store.settings(broker.ctx).items()))
        settings = flush.settings(broker.ctx) if flush.settings else {}
        shown = ", ".join(f"{k}={v}" for k, v in settings.items())
        lines.append(f"flush: {flush.name} ({flush.description}){': ' + shown if shown else ''}")
        lines.append(f"replicator: {cfg.replicator or 'none (standalone)'}")
        lines.append(f"batch codec: {codec_text()}")
    for note in broker.config.notes:
        lines.append(f"note: {note}")
    return lines


def security_warnings(broker: Broker) -> list[str]:
    """What an operator must hear before a broker opens a port beyond this machine without
    ACL: anyone who reaches it may send, consume, and create or delete topics."""
    cfg = broker.config.broker
    acl_plugin = TROCKET_DEFAULTS.switches.get("aclEnable", "acl")
    if "broker" not in cfg.roles or _loopback(cfg.listen_host) or acl_plugin in broker.host.names:
        return []
    return [
        f"the broker listens on {cfg.listen_host}, beyond this machine, with ACL off: anyone who "
        "reaches the port can send, consume and create or delete topics. Turn on aclEnable=true "
        f"(or list the {acl_plugin!r} plugin) and TLS (tls_server_mode); see docs/security.md"
    ]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def section_lines(broker: Broker) -> list[str]:
    lines = []
    for table, (plugin, section) in sorted(broker.host.config_sections().items()):
        values = unstructure(broker.ctx.plugin_config(section.type))
        shown = ", ".join(f"{k}={_show(v)}" for k, v in values.items())
        lines.append(f"[{table}] ({plugin}): {shown}")
    return lines


def _show(value: object) -> str:
    if isinstance(value, tuple | frozenset):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)
