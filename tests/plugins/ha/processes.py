"""A NameServer, a master and its slaves as separate ``trocket`` processes on free loopback
ports, so one can be SIGKILLed while the others run (as users deploy them)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from tests.interop.conftest import subprocess_env
from tests.network.conftest import free_port
from tests.support import start_logged


@attrs.define
class Process:
    name: str
    process: subprocess.Popen[str]
    log: Path
    addr: str = ""
    ha_addr: str = ""
    data_dir: Path | None = None
    config: Path | None = None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()

    def text(self) -> str:
        return self.log.read_text()


@attrs.define
class HaCluster:
    """``start_namesrv`` then ``start_broker`` for a master and slaves; everything is stopped
    by the fixture."""

    root: Path
    namesrv_addr: str = ""
    processes: list[Process] = attrs.field(factory=list)

    def start_namesrv(self, broker: str = "") -> Process:
        """The NameServer; ``broker`` lines go in its ``[broker]`` table (TLS keys)."""
        port = free_port()
        config = self.root / "namesrv.toml"
        config.write_text(f"[broker]\n{broker}\n[namesrv]\nlisten_port = {port}\n")
        log = self.root / "namesrv.log"
        process = Process(
            "namesrv", start_logged("namesrv", ["namesrv", "-c", str(config)], log, fresh=False), log
        )
        self.namesrv_addr = f"127.0.0.1:{port}"
        self.processes.append(process)
        return process

    def broker_config(
        self,
        name: str,
        role: str,
        broker_id: int,
        *,
        file_size: str = "4MiB",
        ha: str = "",
        extra: str = "",
        tables: str = "",
        plugins: tuple[str, ...] = (),
    ) -> tuple[Path, str, str, Path]:
        """The broker's TOML config, written; ``plugins`` are added to the pair's usual set,
        ``extra`` lines go in ``[broker]``, ``tables`` after the others."""
        port, ha_port = free_port(), free_port()
        data_dir = self.root / name
        config = self.root / f"{name}.toml"
        config.write_text(
            f"""
[broker]
plugins = {json.dumps(["store_mmap", "flush_async", "remoting", "ha", "retry_dlq", *plugins])}
replicator = "ha"
broker_role = "{role}"
broker_id = {broker_id}
data_dir = "{data_dir}"
listen_port = {port}
namesrv_addr = ["{self.namesrv_addr}"]
graceful_timeout = "5s"
{extra}
[store_mmap]
commit_log_file_size = "{file_size}"

[remoting]
register_period = "2s"
slave_sync_interval = "1s"

[ha]
listen_port = {ha_port}
heartbeat_interval = "1s"
reconnect_interval = "500ms"
{ha}
{tables}
"""
        )
        return config, f"127.0.0.1:{port}", f"127.0.0.1:{ha_port}", data_dir

    def start_broker(self, name: str, role: str, broker_id: int, **options: Any) -> Process:
        config, addr, ha_addr, data_dir = self.broker_config(name, role, broker_id, **options)
        return self.run_broker(name, config, addr, ha_addr, data_dir)

    def run_broker(self, name: str, config: Path, addr: str, ha_addr: str, data_dir: Path) -> Process:
        log = self.root / f"{name}.log"
        process = Process(
            name,
            start_logged(name, ["broker", "-c", str(config)], log, fresh=False),
            log,
            addr,
            ha_addr,
            data_dir,
            config,
        )
        self.processes.append(process)
        return process

    def restart(self, process: Process) -> Process:
        assert process.config is not None and process.data_dir is not None
        process.kill()
        self.processes.remove(process)
        return self.run_broker(process.name, process.config, process.addr, process.ha_addr, process.data_dir)

    def admin_json(self, *args: str) -> object:
        result = subprocess.run(
            [sys.executable, "-m", "trocket", "admin", args[0], "-n", self.namesrv_addr, *args[1:], "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env=subprocess_env(),
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def figures(self, broker: Process) -> dict[str, str]:
        rows = self.admin_json("brokerStatus", "-b", broker.addr)
        assert isinstance(rows, list)
        return {row["#Key"]: row["#Value"] for row in rows}

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop()


@contextmanager
def ha_cluster(root: Path, namesrv: str = "") -> Iterator[HaCluster]:
    """``namesrv``: ``[broker]`` lines of the NameServer's config."""
    cluster = HaCluster(root)
    try:
        cluster.start_namesrv(namesrv)
        yield cluster
    finally:
        cluster.stop_all()


def commit_log_bytes(data_dir: Path, end: int) -> bytes:
    """The first ``end`` bytes of a store's commit log (pre-allocated files hold zeros)."""
    out = b"".join(p.read_bytes() for p in sorted((data_dir / "commitlog").iterdir()))
    return out[:end]
