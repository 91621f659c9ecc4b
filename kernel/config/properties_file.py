"""Accept a RocketMQ ``broker.properties`` file and map it onto the native model.

Each supported key has a target (table and key) and a converter from RocketMQ's own units
(milliseconds, hours, bytes) to ours. Values are checked here, so a bad value is reported
with the properties key even when its plugin is not loaded. Unknown keys are errors.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from kernel.config.broker import DEFAULT_PLUGINS, Config
from kernel.config.rocketmq_keys import ROCKETMQ_KEYS
from kernel.config.text import read_config_text
from kernel.config.toml_file import config_from_tables
from kernel.errors import ConfigError, ConfigErrors
from kernel.plugin import available_plugins


def _text(value: str) -> str:
    if not value:
        raise ValueError("expected a non-empty value")
    return value


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"expected an integer, got {value!r}") from None


def _millis(value: str) -> str:
    return f"{_integer(value)}ms"


def _seconds(value: str) -> str:
    return f"{_integer(value)}s"


def _hours(value: str) -> str:
    return f"{_integer(value)}h"


def _boolean(value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return value.lower() == "true"


def _flush_disk_type(value: str) -> str:
    mapping = {"ASYNC_FLUSH": "async", "SYNC_FLUSH": "sync"}
    if value not in mapping:
        raise ValueError(f"expected ASYNC_FLUSH or SYNC_FLUSH, got {value!r}")
    return mapping[value]


def _broker_role(value: str) -> str:
    if value not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
        raise ValueError(f"expected ASYNC_MASTER, SYNC_MASTER or SLAVE, got {value!r}")
    return value


def _addresses(value: str) -> list[str]:
    parts = [p.strip() for p in value.split(";") if p.strip()]
    for part in parts:
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"expected host:port;host:port, got {value!r}")
    return parts


def _transient_pool(value: str) -> str:
    return "buffered" if _boolean(value) else "pwrite"


@attrs.frozen
class PropertyMapping:
    """Where one RocketMQ property lands in the native model."""

    section: str
    key: str
    convert: Callable[[str], Any]
    expected: str


MAPPINGS: dict[str, PropertyMapping] = {
    "brokerClusterName": PropertyMapping("broker", "cluster_name", _text, "a cluster name"),
    "brokerName": PropertyMapping("broker", "broker_name", _text, "a broker name"),
    "brokerId": PropertyMapping("broker", "broker_id", _integer, "0 for a master, >0 for a slave"),
    "listenPort": PropertyMapping("broker", "listen_port", _integer, "a TCP port"),
    "namesrvAddr": PropertyMapping("broker", "namesrv_addr", _addresses, "host:port;host:port"),
    "brokerRole": PropertyMapping("broker", "broker_role", _broker_role, "ASYNC_MASTER|SYNC_MASTER|SLAVE"),
    "flushDiskType": PropertyMapping("broker", "flush", _flush_disk_type, "ASYNC_FLUSH|SYNC_FLUSH"),
    "storePathRootDir": PropertyMapping("broker", "data_dir", _text, "a directory"),
    "maxMessageSize": PropertyMapping("broker", "max_message_size", _integer, "bytes"),
    "messageDelayLevel": PropertyMapping("broker", "message_delay_level", _text, "'1s 5s ... 2h'"),
    "defaultTopicQueueNums": PropertyMapping("broker", "default_topic_queue_nums", _integer, "a count"),
    "autoCreateTopicEnable": PropertyMapping("broker", "auto_create_topic_enable", _boolean, "true|false"),
    "storePathCommitLog": PropertyMapping("store_mmap", "commit_log_dir", _text, "a directory"),
    "mapedFileSizeCommitLog": PropertyMapping("store_mmap", "commit_log_file_size", _integer, "bytes"),
    "mappedFileSizeCommitLog": PropertyMapping("store_mmap", "commit_log_file_size", _integer, "bytes"),
    "mapedFileSizeConsumeQueue": PropertyMapping(
        "store_mmap", "consume_queue_file_size", _integer, "bytes (a multiple of 20)"
    ),
    "mappedFileSizeConsumeQueue": PropertyMapping(
        "store_mmap", "consume_queue_file_size", _integer, "bytes (a multiple of 20)"
    ),
    "deleteWhen": PropertyMapping("store_mmap", "delete_when", _text, "hours such as 04 or 04;16"),
    "fileReservedTime": PropertyMapping("store_mmap", "file_reserved_time", _hours, "hours"),
    "diskMaxUsedSpaceRatio": PropertyMapping(
        "store_mmap", "disk_max_used_space_ratio", _integer, "a percentage"
    ),
    "flushIntervalCommitLog": PropertyMapping("flush_async", "interval", _millis, "milliseconds"),
    "flushCommitLogLeastPages": PropertyMapping("flush_async", "least_pages", _integer, "pages"),
    "flushCommitLogThoroughInterval": PropertyMapping(
        "flush_async", "thorough_interval", _millis, "milliseconds"
    ),
    "flushCommitLogTimed": PropertyMapping("flush_async", "timed", _boolean, "true|false"),
    "commitIntervalCommitLog": PropertyMapping("flush_async", "commit_interval", _millis, "milliseconds"),
    "commitCommitLogLeastPages": PropertyMapping("flush_async", "commit_least_pages", _integer, "pages"),
    "commitCommitLogThoroughInterval": PropertyMapping(
        "flush_async", "commit_thorough_interval", _millis, "milliseconds"
    ),
    "transientStorePoolEnable": PropertyMapping(
        "store_mmap", "write_path", _transient_pool, "true (buffered writes) or false"
    ),
    "flushIntervalConsumeQueue": PropertyMapping("broker", "view_persist_interval", _millis, "milliseconds"),
    "flushConsumeQueueThoroughInterval": PropertyMapping(
        "broker", "view_persist_thorough_interval", _millis, "milliseconds"
    ),
    "flushConsumeQueueLeastPages": PropertyMapping(
        "store_mmap", "flush_consume_queue_least_pages", _integer, "pages"
    ),
    "timerMaxDelaySec": PropertyMapping("retry_dlq", "timer_max_delay", _seconds, "seconds"),
    "serverChannelMaxIdleTimeSeconds": PropertyMapping(
        "remoting", "channel_max_idle_time", _seconds, "seconds"
    ),
    "syncFlushTimeout": PropertyMapping("flush_sync", "timeout", _millis, "milliseconds"),
    "haListenPort": PropertyMapping("ha", "listen_port", _integer, "a TCP port"),
    "haMasterAddress": PropertyMapping("ha", "master_address", _text, "the master's host:haListenPort"),
    "haTransferBatchSize": PropertyMapping("ha", "transfer_batch_size", _integer, "bytes"),
    "haSendHeartbeatInterval": PropertyMapping("ha", "heartbeat_interval", _millis, "milliseconds"),
    "haHousekeepingInterval": PropertyMapping("ha", "housekeeping_interval", _millis, "milliseconds"),
    "haMaxGapNotInSync": PropertyMapping("ha", "max_gap_not_in_sync", _integer, "bytes"),
    "haSlaveFallbehindMax": PropertyMapping("ha", "max_gap_not_in_sync", _integer, "bytes"),
    "slaveReadEnable": PropertyMapping("remoting", "slave_read_enable", _boolean, "true|false"),
    "accessMessageInMemoryMaxRatio": PropertyMapping(
        "remoting", "access_message_in_memory_max_ratio", _integer, "a percentage of RAM"
    ),
    "brokerIP1": PropertyMapping("broker", "listen_host", _text, "the address clients reach"),
    "brokerPermission": PropertyMapping("remoting", "broker_permission", _integer, "6 (RW), 4 (R) or 2 (W)"),
    "longPollingEnable": PropertyMapping("remoting", "long_polling_enable", _boolean, "true|false"),
    "shortPollingTimeMills": PropertyMapping("remoting", "short_polling_time", _millis, "milliseconds"),
    "registerNameServerPeriod": PropertyMapping("remoting", "register_period", _millis, "milliseconds"),
    "flushConsumerOffsetInterval": PropertyMapping(
        "remoting", "offset_persist_interval", _millis, "milliseconds"
    ),
    "autoCreateSubscriptionGroup": PropertyMapping(
        "remoting", "auto_create_subscription_group", _boolean, "true|false"
    ),
}

SECOND_TARGETS: dict[str, PropertyMapping] = {
    "syncFlushTimeout": PropertyMapping("ha", "sync_timeout", _millis, "milliseconds"),
}
"""Keys RocketMQ reads in two places: ``syncFlushTimeout`` bounds the flush wait and the slave
wait of a SYNC_MASTER."""

_FLUSH_PLUGIN = {"sync": "flush_sync", "async": "flush_async"}


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


def _unknown_key(key: str) -> str:
    """An error for a key neither Trocket nor RocketMQ defines, with the closest names."""
    supported = sorted(MAPPINGS)
    close = difflib.get_close_matches(key, sorted({*supported, *ROCKETMQ_KEYS}), n=3, cutoff=0.75)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return (
        f"unknown key (neither Trocket nor RocketMQ defines it); {hint}supported keys: {', '.join(supported)}"
    )


def load_properties(path: Path, *, lenient: bool = False) -> Config:
    """Map a RocketMQ ``broker.properties`` file onto :class:`Config`.

    :raises ConfigError: unknown key, bad value, or unreadable file; naming file and key.
    """
    source = str(path)
    props = parse_properties(read_config_text(path), source=source)
    tables: dict[str, dict[str, Any]] = {"broker": {}}
    errors: list[ConfigError] = []
    ignored: list[str] = []
    for key, raw in props.items():
        mapping = MAPPINGS.get(key)
        if mapping is None and key in ROCKETMQ_KEYS:
            ignored.append(key)  # a RocketMQ setting Trocket has no use for: start anyway
            continue
        if mapping is None:
            errors.append(ConfigError(source, key, _unknown_key(key)))
            continue
        second = SECOND_TARGETS.get(key)
        for target in (mapping, second) if second else (mapping,):
            try:
                value = target.convert(raw)
            except ValueError as error:
                errors.append(ConfigError(source, key, f"{error} (expected {target.expected})"))
                break
            tables.setdefault(target.section, {})[target.key] = value
    if not lenient:
        ConfigErrors.raise_any(errors)
    flush = tables["broker"].get("flush", "async")
    wanted = [p for p in DEFAULT_PLUGINS if p not in _FLUSH_PLUGIN.values()]
    wanted.append(_FLUSH_PLUGIN[flush])
    if "broker_role" in tables["broker"]:
        # A properties file has no plugin list: naming a role is asking for RocketMQ's HA
        # service (masters serve slaves, slaves copy their master).
        wanted.append("ha")
        tables["broker"].setdefault("replicator", "ha")
    installed = available_plugins()
    plugins = [p for p in wanted if p in installed]
    missing = [p for p in wanted if p not in installed]
    tables["broker"]["plugins"] = plugins
    config = config_from_tables(tables, source=source, lenient=lenient)
    # Properties name the role's settings for every policy (RocketMQ files list both flush
    # kinds); settings for plugins this broker does not load are reported, not fatal.
    notes = [f"{key}: a RocketMQ setting Trocket does not use; ignored" for key in ignored]
    if missing:
        notes.append(
            f"plugins this file implies are not installed (not part of this build yet): {', '.join(missing)}"
        )
    kept: dict[str, dict[str, Any]] = {}
    for section, values in config.sections.items():
        if section in plugins:
            kept[section] = values
        else:
            targets = [*MAPPINGS.items(), *SECOND_TARGETS.items()]
            keys = ", ".join(k for k, m in targets if m.section == section and m.key in values)
            notes.append(f"{keys}: applies to plugin {section!r}, which this broker does not load")
    return attrs.evolve(config, sections=kept, notes=tuple(notes), problems=(*errors, *config.problems))
