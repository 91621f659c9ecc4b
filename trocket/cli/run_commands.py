"""``trocket up``, ``trocket broker``, ``trocket namesrv`` and ``trocket controller``: run servers
until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import trio

from kernel import Broker, Config
from kernel.lifecycle import run_until_signalled
from kernel.plugin import available_plugins
from trocket.cli.assembly import describe_broker, embedded, load, security_warnings
from trocket.cli.auto_failover import ETCD_CLIENT, EtcdMissing, auto_replicas, start_local_etcd
from trocket.cli.defaults import TROCKET_DEFAULTS

log = logging.getLogger("trocket")

INGRESS_PLUGIN = "remoting"
NAMESRV_PLUGIN = "namesrv"
CONTROLLER_PLUGIN = "controller"


def add_parsers(sub: Any) -> None:
    up = sub.add_parser(
        "up",
        help="NameServer + broker in one process on loopback, data under ./data (the embedded default)",
    )
    up.add_argument("-c", "--config", help="TOML or broker.properties file (default: built-in)")
    up.add_argument("--data-dir", default=None, help="store root (default ./data)")
    up.add_argument(
        "--metrics-port",
        type=int,
        default=METRICS_PORT,
        help=f"Prometheus endpoint on 127.0.0.1 (default {METRICS_PORT}, RocketMQ 5's; the --ha slave's "
        "is the next port; 0 picks free ones; -1 turns metrics off). Without -c only: a config file "
        "says for itself",
    )
    up.add_argument(
        "--console-port",
        type=int,
        default=CONSOLE_PORT,
        help=f"web console on 127.0.0.1 (default {CONSOLE_PORT}, RocketMQ Dashboard's; 0 picks a free one; "
        "-1 turns it off). Without -c only",
    )
    up.add_argument(
        "--grpc-port",
        type=int,
        default=GRPC_PORT,
        help=f"RocketMQ 5 gRPC endpoint (the proxy) on 127.0.0.1 (default {GRPC_PORT}, RocketMQ proxy's; 0 "
        "picks a free one; -1 turns it off). Without -c only: a config file adds role proxy and plugin proxy",
    )
    up.add_argument(
        "--ha",
        choices=["sync", "async", "auto"],
        help="also run a slave: master (SYNC_MASTER or ASYNC_MASTER) on 10911, HA port 10912, slave "
        "on 10921; data under DATA_DIR/master and DATA_DIR/slave. 'auto': automatic failover, a "
        "local etcd, a controller (9878) and three replicas (10911, 10921, 10931); see docs/failover.md",
    )
    up.set_defaults(handler=cmd_up)

    broker = sub.add_parser("broker", help="run a broker from a config file")
    broker.add_argument("-c", "--config", required=True, help="TOML or broker.properties file")
    broker.set_defaults(handler=cmd_broker)

    namesrv = sub.add_parser("namesrv", help="run a NameServer")
    namesrv.add_argument("-c", "--config", help="TOML file with a [namesrv] table")
    namesrv.set_defaults(handler=cmd_namesrv)

    proxy = sub.add_parser("proxy", help="run a RocketMQ 5 gRPC proxy in front of a cluster (docs/proxy.md)")
    proxy.add_argument("-n", "--namesrvAddr", dest="namesrv", help="NameServers, ';'-separated")
    proxy.add_argument("-c", "--config", help="TOML file with [broker] (TLS, ACL keys) and [proxy] tables")
    proxy.add_argument("--grpc-port", type=int, default=None, help=f"default {GRPC_PORT}; 0 picks a free one")
    proxy.set_defaults(handler=cmd_proxy)

    controller = sub.add_parser(
        "controller", help="run a controller (automatic failover; its state lives in etcd)"
    )
    controller.add_argument("-c", "--config", help="TOML file with a [controller] table")
    controller.set_defaults(handler=cmd_controller)


HA_SLAVE_PORT = 10921
METRICS_PORT = 5557
METRICS_PLUGIN = "metrics"
CONSOLE_PORT = 8080
CONSOLE_PLUGIN = "console"
GRPC_PORT = 8081
PROXY_PLUGIN = "proxy"


def cmd_up(args: argparse.Namespace) -> int:
    roles = ["broker", "namesrv"]
    if args.ha == "auto":
        return up_auto(args)
    if args.ha:
        configs = ha_pair(args.ha, args.config, args.data_dir, args.metrics_port, args.console_port)
        return serve(*[Broker.assemble(config) for config in configs])
    if args.config:
        config = load(args.config, data_dir=args.data_dir)
        # A file may add roles (a proxy beside the broker); up always hosts these two.
        config = config.with_broker(roles=sorted(set(config.broker.roles) | set(roles)))
    else:
        plugins = _installed(TROCKET_DEFAULTS.plugins)
        grpc = args.grpc_port >= 0 and PROXY_PLUGIN in available_plugins()
        config = embedded(
            roles=roles + (["proxy"] if grpc else []),
            data_dir=args.data_dir,
            plugins=_with_served(plugins, args.metrics_port, args.console_port)
            + ([PROXY_PLUGIN] if grpc else []),
            tables={
                **_served_tables(args.metrics_port, args.console_port),
                **({PROXY_PLUGIN: {"grpc_port": args.grpc_port}} if grpc else {}),
            },
        )
    return serve(Broker.assemble(config))


def up_auto(args: argparse.Namespace) -> int:
    """``--ha auto``: etcd as a child process, the rest in this one (see auto_failover)."""
    if args.config:
        print("trocket up --ha auto uses its built-in configuration; drop -c", file=sys.stderr)
        return 2
    root = Path(args.data_dir or "data")
    try:
        etcd = start_local_etcd(root / "etcd")
    except (EtcdMissing, RuntimeError) as error:
        print(f"trocket up --ha auto: {error}", file=sys.stderr)
        return 2
    print(f"etcd: http://{ETCD_CLIENT} (data under {root / 'etcd'})", flush=True)
    plugins = _installed(TROCKET_DEFAULTS.plugins)
    replication = TROCKET_DEFAULTS.replication_plugin
    plugins += [replication] if replication and replication not in plugins else []
    first = _served_tables(args.metrics_port, args.console_port)
    try:
        served = _with_served(plugins, args.metrics_port, args.console_port)
        configs = auto_replicas(root, plugins, served, first)
        return serve(*[Broker.assemble(config) for config in configs])
    finally:
        etcd.terminate()
        try:
            etcd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            etcd.kill()


def _installed(names: tuple[str, ...] | list[str]) -> list[str]:
    installed = available_plugins()
    return [name for name in names if name in installed]


def _with_served(plugins: list[str], metrics_port: int, console_port: int = -1) -> list[str]:
    """The embedded plugin list with the metrics and console plugins whose port is not -1
    (when installed)."""
    installed = available_plugins()
    wanted = [(METRICS_PLUGIN, metrics_port), (CONSOLE_PLUGIN, console_port)]
    extra = [name for name, port in wanted if port >= 0 and name in installed and name not in plugins]
    return [*plugins, *extra]


def _served_tables(metrics_port: int, console_port: int = -1) -> dict[str, dict[str, object]]:
    tables: dict[str, dict[str, object]] = {}
    if metrics_port >= 0:
        tables[METRICS_PLUGIN] = {"prom_exporter_port": metrics_port}
    if console_port >= 0:
        tables[CONSOLE_PLUGIN] = {"port": console_port}
    return tables


def ha_pair(
    mode: str, config_path: str | None, data_dir: str | None, metrics_port: int = -1, console_port: int = -1
) -> list[Config]:
    """A NameServer + master and a slave of the same broker name, in one process: the local
    pair of ``trocket up --ha``. The slave learns its master's HA address from the NameServer.
    Without a config file each serves metrics, the slave on the port after the master's; the
    master process serves the console."""
    root = Path(data_dir or "data")
    replication = TROCKET_DEFAULTS.replication_plugin
    plugins = _installed(TROCKET_DEFAULTS.plugins)
    plugins += [replication] if replication and replication not in plugins else []
    common = {"plugins": plugins, "replicator": TROCKET_DEFAULTS.replicator}
    role = "SYNC_MASTER" if mode == "sync" else "ASYNC_MASTER"
    master = {"roles": ["broker", "namesrv"], "broker_role": role, "data_dir": root / "master", **common}
    slave = {
        "roles": ["broker"],
        "broker_role": "SLAVE",
        "broker_id": 1,
        "listen_port": HA_SLAVE_PORT,
        "data_dir": root / "slave",
        **common,
    }
    if config_path:
        return [load(config_path, **master), load(config_path, **slave)]
    slave_port = metrics_port + 1 if metrics_port > 0 else metrics_port
    return [
        embedded(
            tables=_served_tables(port, console),
            **{**member, "plugins": _with_served(plugins, port, console)},
        )
        for member, port, console in ((master, metrics_port, console_port), (slave, slave_port, -1))
    ]


def cmd_broker(args: argparse.Namespace) -> int:
    return serve(Broker.assemble(load(args.config)))


def cmd_namesrv(args: argparse.Namespace) -> int:
    return serve(Broker.assemble(load(args.config, roles=["namesrv"])))


def cmd_proxy(args: argparse.Namespace) -> int:
    """The ``proxy`` role alone: gRPC for RocketMQ 5 clients, remoting to the brokers."""
    namesrv = [a for a in (args.namesrv or "").split(";") if a] or None
    config = load(args.config, roles=["proxy"], namesrv_addr=namesrv)
    plugins = list(config.broker.plugins)
    plugins += [name for name in (PROXY_PLUGIN,) if name not in plugins]
    sections = {name: dict(values) for name, values in config.sections.items()}
    if args.grpc_port is not None:
        sections[PROXY_PLUGIN] = {**sections.get(PROXY_PLUGIN, {}), "grpc_port": args.grpc_port}
    config = attrs.evolve(config.with_broker(plugins=plugins), sections=sections)
    return serve(Broker.assemble(config))


def cmd_controller(args: argparse.Namespace) -> int:
    config = load(args.config, roles=["controller"])
    if CONTROLLER_PLUGIN not in config.broker.plugins:
        config = config.with_broker(plugins=[*config.broker.plugins, CONTROLLER_PLUGIN])
    return serve(Broker.assemble(config))


def serve(*brokers: Broker) -> int:
    """Print what runs (and what does not exist yet), then run until SIGINT/SIGTERM."""
    for broker in brokers:
        for line in describe_broker(broker):
            print(line, flush=True)
        for line in missing_roles(broker):
            print(f"not available: {line}", flush=True)
        for line in security_warnings(broker):
            print(f"WARNING: {line}", flush=True)
    trio.run(_serve, brokers)
    clean = all(broker.clean_stop for broker in brokers)
    print("stopped cleanly" if clean else "stopped (abort marker kept: next start recovers)", flush=True)
    return 0 if clean else 1


async def _serve(brokers: tuple[Broker, ...]) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(run_until_signalled, list(brokers))
        for broker in brokers:
            if broker.recovery is not None:
                r = broker.recovery
                name = f"{broker.config.broker.broker_name} id {broker.config.broker.broker_id}: "
                print(
                    f"recovery: {name if len(brokers) > 1 else ''}"
                    f"{'normal' if r.clean_shutdown else 'abnormal'}, log [{r.log_min_offset}, "
                    f"{r.log_max_offset}), {r.records_scanned} records scanned, "
                    f"{r.truncated_bytes} bytes truncated",
                    flush=True,
                )
        for broker in brokers:
            for line in served_urls(broker):
                print(line, flush=True)
        print("ready (Ctrl-C to stop)", flush=True)


def served_urls(broker: Broker) -> list[str]:
    """``name: url`` for every address a plugin serves people at (its ``...Url`` runtime figure:
    the metrics endpoint, the console), so a newcomer can open them."""
    if not {"broker", "proxy"} & broker.config.broker.roles:
        return []
    lines = []
    for figures in broker.ctx.hook.trocket_runtime_figures(ctx=broker.ctx):
        for key, value in sorted(figures.items()):
            if key.endswith("Url") and value:
                lines.append(f"{key[: -len('Url')]}: {value}")
    return lines


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
