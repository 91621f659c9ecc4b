"""flush_sync: RocketMQ's SYNC_FLUSH as a plugin (group commit on the flushed watermark).

Select it with ``[broker] flush = "sync"`` (or ``flushDiskType=SYNC_FLUSH``).
"""

from __future__ import annotations

from collections.abc import Mapping

from kernel import BrokerContext, ConfigSection, FlushPolicyProvider, hookimpl
from kernel.protocols import MessageStore
from plugins.flush_sync.config import PROPERTIES, FlushSyncConfig
from plugins.flush_sync.policy import GroupCommitFlush
from wire.units import format_duration


def _make(ctx: BrokerContext, store: MessageStore) -> GroupCommitFlush:
    return GroupCommitFlush(store, ctx.plugin_config(FlushSyncConfig).timeout)


def _settings(ctx: BrokerContext) -> Mapping[str, object]:
    return {"timeout": format_duration(ctx.plugin_config(FlushSyncConfig).timeout)}


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("flush_sync", FlushSyncConfig, PROPERTIES)]


@hookimpl
def trocket_register_flush_policies() -> list[FlushPolicyProvider]:
    return [
        FlushPolicyProvider("sync", _make, "group commit: acknowledged after fsync (SYNC_FLUSH)", _settings)
    ]
