"""``[namesrv]``: where the NameServer listens and how it ages out brokers."""

from __future__ import annotations

from pathlib import Path

import attrs

from kernel.config import fields


@attrs.frozen(kw_only=True)
class NamesrvConfig:
    listen_host: str = fields.string("127.0.0.1")
    listen_port: int = fields.integer(9876, minimum=0, maximum=65535)
    """``listenPort`` of namesrv.properties; 0 picks a free port (tests)."""
    broker_expiry: float = fields.duration("120s")
    """A broker that has not registered for this long is dropped from every route."""
    scan_interval: float = fields.duration("10s")
    """How often expired brokers are looked for (RocketMQ: every 10 s)."""
    kv_config_path: Path | None = fields.path(None)
    """``kvConfigPath``; default ``<data_dir>/namesrv/kvConfig.json``."""
    max_frame_size: int = fields.size("16MiB", minimum=1024)
    max_connections: int = fields.integer(10000, minimum=1)
    channel_max_idle_time: float = fields.duration("120s")
    """``serverChannelMaxIdleTimeSeconds``: a connection with nothing read or written and no
    request in flight for this long is closed (a peer gone without a FIN, a stalled client)."""
    frame_read_timeout: float = fields.duration("30s")
    """A frame whose first bytes arrived must be complete within this long, or the connection
    is closed (a truncated frame or a declared 15 MiB that never comes holds no buffer)."""
