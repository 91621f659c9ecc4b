"""flush_async: RocketMQ's ASYNC_FLUSH as a plugin (interval flush, acks from page cache).

Select it with ``[broker] flush = "async"`` (the default, or ``flushDiskType=ASYNC_FLUSH``).
"""

from __future__ import annotations

from collections.abc import Mapping

from kernel import BrokerContext, ConfigSection, FlushPolicyProvider, hookimpl
from kernel.protocols import MessageStore
from plugins.flush_async.config import PROPERTIES, FlushAsyncConfig
from plugins.flush_async.policy import IntervalFlush
from wire.units import format_duration


def _make(ctx: BrokerContext, store: MessageStore) -> IntervalFlush:
    cfg = ctx.plugin_config(FlushAsyncConfig)
    return IntervalFlush(
        store,
        cfg.interval,
        cfg.least_pages,
        cfg.thorough_interval,
        cfg.timed,
        cfg.commit_interval,
        cfg.commit_least_pages,
        cfg.commit_thorough_interval,
    )


def _settings(ctx: BrokerContext) -> Mapping[str, object]:
    cfg = ctx.plugin_config(FlushAsyncConfig)
    return {
        "interval": format_duration(cfg.interval),
        "least_pages": cfg.least_pages,
        "thorough_interval": format_duration(cfg.thorough_interval),
        "timed": cfg.timed,
        "commit_interval": format_duration(cfg.commit_interval),
        "commit_least_pages": cfg.commit_least_pages,
        "commit_thorough_interval": format_duration(cfg.commit_thorough_interval),
    }


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("flush_async", FlushAsyncConfig, PROPERTIES)]


@hookimpl
def trocket_register_flush_policies() -> list[FlushPolicyProvider]:
    return [
        FlushPolicyProvider(
            "async", _make, "interval flush: acknowledged from the page cache (ASYNC_FLUSH)", _settings
        )
    ]
