"""A broker started as a user starts it (``trocket up -c FILE``), on free loopback ports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.network.conftest import free_port
from tests.support import start_logged

REPO = Path(__file__).resolve().parents[2]
CPP_CLIENT = Path(__file__).with_name("cpp_client.py")


def subprocess_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@attrs.define
class RunningBroker:
    process: subprocess.Popen[str]
    namesrv: str
    broker: str
    data_dir: Path
    log: Path

    def stop(self) -> None:
        """SIGTERM (a clean stop) if still running, and wait for it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)

    def admin(
        self, *args: str, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``trocket admin`` as a user runs it; ``env`` adds environment variables."""
        result = subprocess.run(
            [sys.executable, "-m", "trocket", "admin", args[0], "-n", self.namesrv, *args[1:]],
            capture_output=True,
            text=True,
            timeout=60,
            env=subprocess_env() | (env or {}),
        )
        if check and result.returncode != 0:
            raise AssertionError(f"trocket admin {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def admin_json(self, *args: str) -> object:
        return json.loads(self.admin(*args, "--json").stdout)

    def figures(self, *auth: str) -> dict[str, str]:
        """``brokerStatus`` of this broker as a dict (``auth``: ``--authKey K --authSecret S``)."""
        rows = self.admin_json("brokerStatus", "-b", self.broker, *auth)
        assert isinstance(rows, list)
        return {row["#Key"]: row["#Value"] for row in rows}


def run_client(
    *args: str,
    timeout: float = 120,
    credentials: tuple[str, str] | None = None,
    env_extra: dict[str, str] | None = None,
    shutdown_abort_ok: bool = False,
) -> list[dict]:
    """The official client's results; ``credentials`` (access key, secret) make it sign;
    ``env_extra`` adds environment variables. ``shutdown_abort_ok``: a client that reported
    ``done`` and then aborted in its own ``shutdown()`` with ``boost::thread_interrupted`` (a
    known crash of the C++ client's shutdown when several run at once, apache/rocketmq-clients
    #421 and rocketmq-client-cpp #335 describe its kind) still returns its results."""
    env = subprocess_env() | (env_extra or {})
    if credentials is not None:
        env |= {"CPP_CLIENT_ACCESS_KEY": credentials[0], "CPP_CLIENT_SECRET_KEY": credentials[1]}
    result = subprocess.run(
        [sys.executable, str(CPP_CLIENT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    aborted_after_done = (
        shutdown_abort_ok
        and result.returncode == -signal.SIGABRT
        and "boost::thread_interrupted" in result.stderr
        and '"kind": "done"' in result.stdout
    )
    assert result.returncode == 0 or aborted_after_done, (
        f"official client failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    )
    decoder = json.JSONDecoder()
    marker = "@RESULT@"
    out = []
    for line in result.stdout.splitlines():
        at = line.find(marker)
        while at >= 0:
            record, end = decoder.raw_decode(line, at + len(marker))
            out.append(record)
            at = line.find(marker, end)
    return out


def start_broker(
    tmp_path: Path,
    extra: str = "",
    *,
    namesrv_port: int | None = None,
    store: str = "",
    namesrv: str = "",
    tables: str = "",
    open_files: tuple[int, int] | None = None,
) -> RunningBroker:
    """A `trocket up` process; ``extra`` lines go into ``[broker]``, ``store`` into ``[store_mmap]``,
    ``namesrv`` into ``[namesrv]``; ``tables`` (whole tables) are appended; ``open_files`` is
    its (soft, hard) open-files limit."""
    namesrv_port = namesrv_port or free_port()
    broker_port = free_port()
    config = tmp_path / "trocket.toml"
    config.write_text(
        f"""
[broker]
data_dir = "{tmp_path / "data"}"
listen_port = {broker_port}
namesrv_addr = ["127.0.0.1:{namesrv_port}"]
{extra}
[store_mmap]
{store if "commit_log_file_size" in store else 'commit_log_file_size = "16MiB"' + chr(10) + store}

[namesrv]
listen_port = {namesrv_port}
{namesrv}
{tables}
"""
    )
    log = tmp_path / "broker.log"
    process = start_logged("broker", ["up", "-c", str(config)], log, open_files=open_files)
    return RunningBroker(
        process, f"127.0.0.1:{namesrv_port}", f"127.0.0.1:{broker_port}", tmp_path / "data", log
    )


@pytest.fixture
def running_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    broker = start_broker(tmp_path)
    try:
        yield broker
    finally:
        broker.stop()
