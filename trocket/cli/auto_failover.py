"""``trocket up --ha auto``: automatic failover on one machine, for trying it out.

A local etcd (Debian's ``etcd-server``, data under ``DATA_DIR/etcd``, client port 2379), and in
this process a NameServer with an embedded controller (``enableControllerInNamesrv``, port
9878) and three replicas of ``broker-a`` in controller mode: 10911, 10921 and 10931 (HA ports
one above). Whichever the controller elects registers as the master. Without etcd installed it
says what to install and starts nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from kernel.config import Config
from trocket.cli.assembly import embedded

ETCD_CLIENT = "127.0.0.1:2379"
ETCD_PEER = "127.0.0.1:2380"
CONTROLLER_PORT = 9878
REPLICA_PORTS = (10911, 10921, 10931)


class EtcdMissing(Exception):
    """etcd is not installed; the text says how to install it."""


def start_local_etcd(root: Path) -> subprocess.Popen[bytes]:
    """One etcd member on loopback, its data and log under ``root``; returns once healthy.

    :raises EtcdMissing: no ``etcd`` on the PATH.
    :raises RuntimeError: it exited or did not become healthy within 30 s (the log's tail).
    """
    etcd = shutil.which("etcd")
    if etcd is None:
        raise EtcdMissing(
            "automatic failover keeps its state in etcd, which is not installed: "
            "apt-get install etcd-server (Debian), or put an etcd 3.4+ binary on the PATH"
        )
    root.mkdir(parents=True, exist_ok=True)
    log = root / "etcd.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                etcd,
                "--name", "trocket-local",
                "--data-dir", str(root / "data"),
                "--listen-client-urls", f"http://{ETCD_CLIENT}",
                "--advertise-client-urls", f"http://{ETCD_CLIENT}",
                "--listen-peer-urls", f"http://{ETCD_PEER}",
                "--initial-advertise-peer-urls", f"http://{ETCD_PEER}",
                "--initial-cluster", f"trocket-local=http://{ETCD_PEER}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"etcd exited ({process.returncode}): {log.read_text()[-1500:]}")
        try:
            with urllib.request.urlopen(f"http://{ETCD_CLIENT}/health", timeout=1) as answer:
                if b'"true"' in answer.read():
                    return process
        except OSError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"etcd did not become healthy within 30 s: {log.read_text()[-1500:]}")


def auto_replicas(
    root: Path, plugins: list[str], first_plugins: list[str], first_tables: dict[str, dict[str, Any]]
) -> list[Config]:
    """The NameServer + controller + replica 1, and replicas 2 and 3 (``first_plugins`` and
    ``first_tables``: the first also serves metrics and the console)."""
    configs = []
    for index, port in enumerate(REPLICA_PORTS):
        broker_id = index + 1
        tables: dict[str, dict[str, Any]] = {
            "ha": {
                "controller_mode": True,
                "controller_addr": [f"127.0.0.1:{CONTROLLER_PORT}"],
                "listen_port": port + 1,
            }
        }
        member: dict[str, Any] = {
            "roles": ["broker"],
            "plugins": plugins,
            "replicator": "ha",
            "broker_role": "SYNC_MASTER",
            "broker_id": broker_id,
            "listen_port": port,
            "data_dir": root / f"replica{broker_id}",
        }
        if index == 0:
            member["roles"] = ["broker", "namesrv", "controller"]
            member["plugins"] = [*first_plugins, "controller"]
            tables["controller"] = {
                "enable_controller_in_namesrv": True,
                "listen_port": CONTROLLER_PORT,
                "etcd_endpoints": [ETCD_CLIENT],
            }
            tables |= first_tables
        configs.append(embedded(tables=tables, **member))
    return configs
