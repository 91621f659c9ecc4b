"""A NameServer and a broker in separate processes: a killed broker leaves the routes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.interop.conftest import subprocess_env
from tests.network.conftest import free_port


def start(kind: str, config: Path, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "trocket", kind, "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=subprocess_env(),
        )
    deadline = time.monotonic() + 60
    while "ready" not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    return process


def route_exists(namesrv: str, topic: str) -> bool:
    result = subprocess.run(
        [sys.executable, "-m", "trocket", "admin", "topicRoute", "-n", namesrv, "-t", topic],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )
    return result.returncode == 0


def wait_until_gone(namesrv: str, topic: str, seconds: float) -> float:
    started = time.monotonic()
    while route_exists(namesrv, topic):
        assert time.monotonic() - started < seconds, f"{topic} still routed after {seconds}s"
        time.sleep(0.1)
    return time.monotonic() - started


def test_killed_and_stopped_brokers_leave_the_routes(tmp_path):
    namesrv_port = free_port()
    namesrv = f"127.0.0.1:{namesrv_port}"
    ns_config = tmp_path / "namesrv.toml"
    ns_config.write_text(
        f'[broker]\nroles = ["namesrv"]\ndata_dir = "{tmp_path / "ns"}"\n'
        f'[namesrv]\nlisten_port = {namesrv_port}\nbroker_expiry = "3s"\nscan_interval = "1s"\n'
    )
    ns = start("namesrv", ns_config, tmp_path / "ns.log")
    try:
        for name, stop in (("broker-killed", signal.SIGKILL), ("broker-stopped", signal.SIGTERM)):
            config = tmp_path / f"{name}.toml"
            config.write_text(
                f'[broker]\nbroker_name = "{name}"\ndata_dir = "{tmp_path / name}"\n'
                f'listen_port = {free_port()}\nnamesrv_addr = ["{namesrv}"]\n'
                '[store_mmap]\ncommit_log_file_size = "16MiB"\n'
            )
            broker = start("broker", config, tmp_path / f"{name}.log")
            assert route_exists(namesrv, name), "a broker's own-name topic is routed once it registered"
            broker.send_signal(stop)
            broker.wait(timeout=60)
            wait_until_gone(namesrv, name, seconds=10)
        # No broker registered: commands that ask every master fail instead of answering none.
        for command in ("pendingTransactions", "scheduleProgress"):
            shown = subprocess.run(
                [sys.executable, "-m", "trocket", "admin", command, "-n", namesrv],
                capture_output=True,
                text=True,
                timeout=60,
                env=subprocess_env(),
            )
            assert shown.returncode == 1, shown
            assert "no master broker is registered with the NameServer yet" in shown.stderr, shown.stderr
    finally:
        ns.send_signal(signal.SIGTERM)
        ns.wait(timeout=60)
