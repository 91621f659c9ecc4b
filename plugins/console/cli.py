"""``trocket console``: the web console on its own, watching any cluster."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

import trio

from plugins.console.server import EXPOSED_WARNING, ConsoleServer, is_loopback

DEFAULT_NAMESRV = os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")


def add_parsers(sub: Any) -> None:
    console = sub.add_parser(
        "console",
        help="web console (RocketMQ Dashboard's pages) for a cluster, on http://127.0.0.1:8080/",
    )
    console.add_argument(
        "-n",
        "--namesrvAddr",
        default=DEFAULT_NAMESRV,
        help="NameServers, ';'-separated (default %(default)s)",
    )
    console.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    console.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    console.set_defaults(handler=cmd_console)


def cmd_console(args: argparse.Namespace) -> int:
    addresses = tuple(a.strip() for a in args.namesrvAddr.split(";") if a.strip())
    server = ConsoleServer(addresses, args.host, args.port)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(server.run)
            print(f"console: {url} (cluster of {', '.join(addresses)})", flush=True)
            if not is_loopback(args.host):
                print(f"WARNING: {EXPOSED_WARNING}", flush=True)
            print("ready (Ctrl-C to stop)", flush=True)

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        trio.run(main)
    except KeyboardInterrupt:
        print("stopped", flush=True)
    except OSError as error:
        print(f"trocket: error: {error}", flush=True)
        return 2
    return 0
