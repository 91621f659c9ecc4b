"""``[console]``: where the web console listens and which cluster it watches."""

from __future__ import annotations

import attrs

from kernel.config import fields


@attrs.frozen(kw_only=True)
class ConsoleConfig:
    host: str = fields.string("127.0.0.1")
    """Loopback by default: the console can create and delete topics."""
    port: int = fields.integer(8080, minimum=0, maximum=65535)
    """RocketMQ Dashboard's default; 0 picks a free port (shown as ``consoleUrl``)."""
    max_body: int = fields.size("1MiB", minimum=1024)
    """The largest request body the console reads (a test message, a topic's settings); a
    larger one is refused with 413 before it is read."""
    namesrv_addr: tuple[str, ...] = fields.string_list(())
    """NameServers of the cluster to watch; empty: this broker's own (``[broker] namesrv_addr``)."""
