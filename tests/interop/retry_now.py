"""Test plugin: redeliver given-back messages at once (no delay levels), so the official
client's RECONSUME_LATER path can be exercised before the retry_dlq plugin exists."""

from __future__ import annotations

from kernel import Redelivery, hookimpl


@hookimpl
def trocket_redelivery_decision(attempt: int, max_attempts: int) -> Redelivery:
    return Redelivery.retry(0) if attempt <= max_attempts else Redelivery.dead_letter()
