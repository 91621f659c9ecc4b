"""``[proxy]``: the gRPC endpoint for RocketMQ 5 clients, under RocketMQ proxy's names."""

from __future__ import annotations

import attrs

from kernel.config import fields


@attrs.frozen(kw_only=True)
class ProxyConfig:
    grpc_host: str = fields.string("127.0.0.1")
    """Where the gRPC server listens (RocketMQ's proxy listens on every address; Trocket's
    default is loopback, as the broker's)."""
    grpc_port: int = fields.integer(8081, minimum=0, maximum=65535)
    """RocketMQ proxy's ``grpcServerPort``; 0 picks a free one."""
    advertised_address: str = fields.string("")
    """``host:port`` routes tell clients to dial (default: ``grpc_host`` and the bound port)."""
    namesrv_addr: tuple[str, ...] = fields.string_list(())
    """NameServers to find brokers with (default: ``[broker] namesrv_addr``)."""
    min_invisible_time: float = fields.duration("10s")
    """Shortest invisible duration a receive may ask for (ILLEGAL_INVISIBLE_TIME below it)."""
    max_invisible_time: float = fields.duration("12h")
    default_invisible_time: float = fields.duration("60s")
    """What a push consumer's receive (``auto_renew``) gets; the proxy renews it while the
    client works on the message (RocketMQ's ``defaultInvisibleTimeMills``)."""
    max_long_polling: float = fields.duration("20s")
    """The longest a receive waits for messages (RocketMQ: 20 s; clients send their deadline)."""
    max_body_size: int = fields.size("4MiB", minimum=1)
    """The largest body a send may carry (MESSAGE_BODY_TOO_LARGE above it); also what the
    settings tell producers."""
    max_receive_batch: int = fields.integer(32, minimum=1, maximum=32)
    request_timeout: float = fields.duration("3s")
    """The proxy's own requests to brokers and NameServers."""
    client_expiry: float = fields.duration("120s")
    """A client not heard from (heartbeat, telemetry) for this long is forgotten."""
    grpc_server: str = fields.choice("completion_queue", ("completion_queue", "asyncio"))
    """How trio drives grpcio: ``completion_queue`` polls C-core's completion queue from one
    thread and serves every call on trio's thread (:mod:`.completion_queue_host`);
    ``asyncio`` is grpcio's public ``grpc.aio`` server in its own thread, each call handed to
    trio and back (:mod:`.grpc_host`: slower, kept for a grpcio whose internals moved)."""
