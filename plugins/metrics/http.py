"""The Prometheus endpoint's HTTP side: hypercorn's trio worker in the broker's own loop.

It replaced ``prometheus_client``'s threaded server, which spent an OS thread and a file
descriptor on every connection and never timed out a half-sent request: a thousand idle
connections held a thousand threads, and the file descriptors they took ended the broker when
one of its own persists could not open a file. Hypercorn closes a connection that has not sent a
whole request within ``keep_alive_timeout`` (and idle keep-alive connections likewise), caps
header sizes, and survives running out of descriptors at accept; a scrape renders in a worker
thread, at most :data:`RENDERERS` at a time, so a slow scrape never stalls the loop.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

RENDERERS = 2
"""Scrapes rendered at once; more wait their turn."""
IDLE_TIMEOUT = 5.0
"""Seconds a connection may stay without a whole request (partial headers included)."""
MAX_HEADER_BYTES = 16 * 1024
"""An incomplete request larger than this is refused."""

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def render(
    registry: CollectorRegistry, accept: str, accept_encoding: str, names: list[str]
) -> tuple[bytes, str, bool]:
    """The exposition of ``registry`` (blocking; run in a worker thread): body, content type, and
    whether the body is gzipped. ``names`` restricts it, as ``?name[]=`` does in prometheus_client."""
    encoder, content_type = choose_encoder(accept)
    body = encoder(registry.restricted_registry(names) if names else registry)
    if "gzip" in accept_encoding:
        return gzip.compress(body, compresslevel=1), content_type, True
    return body, content_type, False


def metrics_app(take: Callable[[], CollectorRegistry]) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app serving ``take()`` (called on the loop: the broker's counts at this moment)
    on ``GET /metrics`` and ``GET /``."""
    limiter = trio.CapacityLimiter(RENDERERS)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, b"only GET\n", "text/plain; charset=utf-8", [(b"allow", b"GET, HEAD")])
            return
        if scope["path"] not in ("/metrics", "/"):
            await _answer(send, 404, b"not found: the metrics are at /metrics\n", "text/plain; charset=utf-8")
            return
        registry = take()
        headers = {name.lower(): value.decode("latin-1") for name, value in scope["headers"]}
        names = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("name[]", [])
        body, content_type, gzipped = await trio.to_thread.run_sync(
            render,
            registry,
            headers.get(b"accept", ""),
            headers.get(b"accept-encoding", ""),
            names,
            limiter=limiter,
        )
        extra = [(b"content-encoding", b"gzip")] if gzipped else []
        await _answer(send, 200, b"" if scope["method"] == "HEAD" else body, content_type, extra)

    return app


async def _answer(
    send: Send, status: int, body: bytes, content_type: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def server_config(host: str, port: int) -> HypercornConfig:
    config = HypercornConfig()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.keep_alive_timeout = IDLE_TIMEOUT
    config.read_timeout = int(IDLE_TIMEOUT * 2)
    config.h11_max_incomplete_size = MAX_HEADER_BYTES
    config.graceful_timeout = 1.0
    return config


async def serve_metrics(
    app: Callable[[Scope, Receive, Send], Awaitable[None]],
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until cancelled; ``task_status`` gets the base URL once bound."""
    async with trio.open_nursery() as nursery:
        try:
            bound = await nursery.start(serve, app, server_config(host, port))
        except OSError as error:
            raise OSError(error.errno, f"metrics: cannot listen on {host}:{port}: {error.strerror}") from None
        task_status.started(bound[0])
