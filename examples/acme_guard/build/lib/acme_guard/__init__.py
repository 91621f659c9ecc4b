"""acme_guard: refuse messages to topics an operator denies, before anything is stored.

    [broker]
    plugins = ["store_mmap", "flush_async", "remoting", "namesrv", "acme_guard"]

    [acme_guard]
    deny = ["secret-*", "payroll"]     # shell-style patterns (fnmatch)

A send to a denied topic is answered MESSAGE_ILLEGAL with a remark naming the pattern; the
client sees it in its error. Refusals are counted per topic (``refused``), and the config is
checked when the broker starts: an empty pattern is refused with the key that holds it.
"""

from __future__ import annotations

import fnmatch
import logging
from collections import Counter

import attrs

from kernel import BrokerContext, ConfigSection, MessageBatch, PutStatus, Rejection, StashKey, hookimpl

log = logging.getLogger(__name__)


def _patterns(value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) and p for p in value):
        raise ValueError(f"expected a list of non-empty topic patterns, got {value!r}")
    return tuple(value)


@attrs.frozen
class GuardConfig:
    """The ``[acme_guard]`` table."""

    deny: tuple[str, ...] = attrs.field(default=(), converter=_patterns)
    """Topics (shell-style patterns) no client may send to."""


@attrs.define
class Guard:
    """The running guard: its patterns and what it refused."""

    deny: tuple[str, ...]
    refused: Counter[str] = attrs.field(factory=Counter)

    def denied_by(self, topic: str) -> str | None:
        """The first pattern that denies ``topic``, or None."""
        return next((p for p in self.deny if fnmatch.fnmatchcase(topic, p)), None)


GUARD = StashKey[Guard]("acme_guard")
"""Where the broker keeps the guard (``ctx.stash[GUARD]``): tests and other code read it there."""


@hookimpl
def trocket_config_sections() -> list[ConfigSection]:
    return [ConfigSection("acme_guard", GuardConfig)]


@hookimpl
def trocket_configure(ctx: BrokerContext) -> None:
    ctx.stash[GUARD] = Guard(ctx.plugin_config(GuardConfig).deny)


@hookimpl
def trocket_before_append(batch: MessageBatch, ctx: BrokerContext) -> Rejection | None:
    """Sync, on the put path. A batch that arrived encoded (a client's batch send) has one
    topic and is checked without building a message object per message."""
    guard = ctx.stash[GUARD]
    encoded = batch.encoded
    topics = [encoded.topic] if encoded is not None else [m.topic for m in batch.messages]
    for topic in topics:
        pattern = guard.denied_by(topic)
        if pattern is not None:
            guard.refused[topic] += 1
            return Rejection(
                PutStatus.MESSAGE_ILLEGAL, f"topic {topic!r} is denied by acme_guard pattern {pattern!r}"
            )
    return None
