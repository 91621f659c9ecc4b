"""Serving the console: hypercorn's trio worker in the caller's trio loop.

Hypercorn was picked over uvicorn because it runs on trio itself (uvicorn needs asyncio), so the
console shares the broker's event loop when the plugin runs it and needs no thread; Starlette
was picked for the app because it is small, typed and anyio-based (it runs on trio unchanged).
"""

from __future__ import annotations

import ipaddress
import logging

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from plugins.console.api import ConsoleApi
from plugins.console.app import DEFAULT_MAX_BODY, console_app
from trocket.admin import AdminClient

log = logging.getLogger(__name__)


EXPOSED_WARNING = (
    "the console listens beyond loopback and asks nobody who they are: anyone who reaches it can "
    "create and delete topics and resend messages (bind 127.0.0.1 and tunnel, or put it behind an "
    "authenticating proxy)"
)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve beyond loopback


class _ClientGone(logging.Filter):
    """hypercorn logs an ERROR with a traceback when a client closes its connection while an
    early answer (a 413 before the body was read) is still being sent: its close races the
    answer's last bytes (``trio.BusyResourceError``). Nothing went wrong on the console's side,
    so the record becomes one INFO line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, trio.BusyResourceError):
            log.info("console: a client closed its connection while its answer was being sent")
            return False
        return True


def _hypercorn_log() -> logging.Logger:
    """hypercorn's error log, through the process's logging, with :class:`_ClientGone`."""
    errors = logging.getLogger("plugins.console.hypercorn")
    if not any(isinstance(f, _ClientGone) for f in errors.filters):
        errors.addFilter(_ClientGone())
    return errors


@attrs.define(eq=False)
class ConsoleServer:
    """The console on ``host:port`` (0: a free port), watching the cluster of ``namesrv_addrs``."""

    namesrv_addrs: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 8080
    max_body: int = DEFAULT_MAX_BODY
    """Request bodies larger than this are refused unread (413)."""
    url: str = ""

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status`` gets the URL once the port is bound."""
        async with AdminClient.open(list(self.namesrv_addrs)) as admin:
            config = HypercornConfig()
            config.bind = [f"{self.host}:{self.port}"]
            config.accesslog = None
            config.errorlog = _hypercorn_log()
            config.graceful_timeout = 1.0
            app = console_app(ConsoleApi(admin), max_body=self.max_body)
            async with trio.open_nursery() as nursery:
                try:
                    bound = await nursery.start(serve, app, config)
                except OSError as error:
                    raise OSError(
                        error.errno, f"console: cannot listen on {self.host}:{self.port}: {error.strerror}"
                    ) from None
                self.url = f"{bound[0].rstrip('/')}/"
                log.info("console: serving %s for the cluster of %s", self.url, ", ".join(self.namesrv_addrs))
                if not is_loopback(self.host):
                    log.warning("console: %s", EXPOSED_WARNING)
                task_status.started(self.url)
