"""``trocket plugins`` and ``trocket config check``: what a config loads, and whether it is valid."""

from __future__ import annotations

import argparse
from typing import Any

from kernel import Broker
from kernel.plugin import available_plugins
from trocket.cli.assembly import describe_broker, load, section_lines
from trocket.cli.usage import list_subcommands


def add_parsers(sub: Any) -> None:
    plugins = sub.add_parser("plugins", help="which plugins load, their hooks and providers")
    plugins.add_argument("-c", "--config", help="TOML or broker.properties file (default: built-in)")
    plugins.add_argument("--available", action="store_true", help="list installed plugins only")
    plugins.set_defaults(handler=cmd_plugins)

    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", metavar="ACTION")
    config.set_defaults(handler=list_subcommands(config))
    check = config_sub.add_parser("check", help="validate a config file and show the result")
    check.add_argument("file")
    check.set_defaults(handler=cmd_config_check)


def cmd_plugins(args: argparse.Namespace) -> int:
    if args.available:
        for name, module in sorted(available_plugins().items()):
            print(f"{name:16} {module}")
        return 0
    broker = Broker.assemble(load(args.config))
    for line in describe_broker(broker):
        print(line)
    print()
    providers = {
        "store": broker.host.stores(),
        "flush": broker.host.flush_policies(),
        "replicator": broker.host.replicators(),
        "allocate": broker.host.allocate_strategies(),
    }
    for info in broker.host.describe():
        print(f"{info.name} ({info.module})")
        print(f"  hooks: {', '.join(h for h in info.hooks) or 'none'}")
        for role, provided in providers.items():
            mine = [p.name for p in provided if p.plugin == info.name]
            if mine:
                print(f"  {role} providers: {', '.join(mine)}")
    return 0


def cmd_config_check(args: argparse.Namespace) -> int:
    broker = Broker.assemble(load(args.file, lenient=True))
    print(f"{args.file}: OK")
    for line in describe_broker(broker):
        print(f"  {line}")
    for line in section_lines(broker):
        print(f"  {line}")
    return 0
