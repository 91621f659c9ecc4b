"""``trocket up``, ``trocket broker`` and ``trocket namesrv``: run servers until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
from typing import Any

import trio

from kernel import Broker
from kernel.lifecycle import run_until_signalled
from trocket.cli.assembly import describe_broker, embedded, load

log = logging.getLogger("trocket")

INGRESS_PLUGIN = "remoting"
NAMESRV_PLUGIN = "namesrv"


def add_parsers(sub: Any) -> None:
    up = sub.add_parser(
        "up",
        help="NameServer + broker in one process on loopback, data under ./data (the embedded default)",
    )
    up.add_argument("-c", "--config", help="TOML or broker.properties file (default: built-in)")
    up.add_argument("--data-dir", default=None, help="store root (default ./data)")
    up.set_defaults(handler=cmd_up)

    broker = sub.add_parser("broker", help="run a broker from a config file")
    broker.add_argument("-c", "--config", required=True, help="TOML or broker.properties file")
    broker.set_defaults(handler=cmd_broker)

    namesrv = sub.add_parser("namesrv", help="run a NameServer")
    namesrv.add_argument("-c", "--config", help="TOML file with a [namesrv] table")
    namesrv.set_defaults(handler=cmd_namesrv)


def cmd_up(args: argparse.Namespace) -> int:
    roles = ["broker", "namesrv"]
    if args.config:
        config = load(args.config, roles=roles, data_dir=args.data_dir)
    else:
        config = embedded(roles=roles, data_dir=args.data_dir)
    return serve(Broker.assemble(config))


def cmd_broker(args: argparse.Namespace) -> int:
    return serve(Broker.assemble(load(args.config)))


def cmd_namesrv(args: argparse.Namespace) -> int:
    return serve(Broker.assemble(load(args.config, roles=["namesrv"])))


def serve(broker: Broker) -> int:
    """Print what runs (and what does not exist yet), then run until SIGINT/SIGTERM."""
    for line in describe_broker(broker):
        print(line, flush=True)
    for line in missing_roles(broker):
        print(f"not available: {line}", flush=True)
    trio.run(_serve, broker)
    print(
        "stopped cleanly" if broker.clean_stop else "stopped (abort marker kept: next start recovers)",
        flush=True,
    )
    return 0 if broker.clean_stop else 1


async def _serve(broker: Broker) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(run_until_signalled, [broker])
        if broker.recovery is not None:
            r = broker.recovery
            print(
                f"recovery: {'normal' if r.clean_shutdown else 'abnormal'}, log [{r.log_min_offset}, "
                f"{r.log_max_offset}), {r.records_scanned} records scanned, "
                f"{r.truncated_bytes} bytes truncated",
                flush=True,
            )
        print("ready (Ctrl-C to stop)", flush=True)


def missing_roles(broker: Broker) -> list[str]:
    """Honest statements about roles this build cannot serve yet."""
    roles = broker.config.broker.roles
    names = set(broker.host.names)
    out = []
    if "broker" in roles and INGRESS_PLUGIN not in names:
        out.append(
            f"network ingress (plugin {INGRESS_PLUGIN!r} is not installed): the store runs, "
            "but no client can connect to this broker"
        )
    if "namesrv" in roles and NAMESRV_PLUGIN not in names:
        out.append(
            f"NameServer (plugin {NAMESRV_PLUGIN!r} is not installed): nothing listens for route lookups"
        )
    return out
