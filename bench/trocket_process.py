"""A `trocket up` process for the benchmarks that drive a real broker over TCP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs

from trocket.testing.embedded import free_port

REPO = Path(__file__).resolve().parent.parent


@attrs.frozen
class TrocketProcess:
    namesrv: str
    """The NameServer's address."""
    pid: int


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process (all its threads) has used so far, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def running_trocket(root: Path, broker_keys: str = "", tables: str = "") -> Iterator[str]:
    """NameServer + broker with data under ``root``; ``broker_keys`` are added to ``[broker]``,
    ``tables`` after it. Yields the NameServer address; SIGTERM (a clean stop) at the end."""
    with trocket_process(root, broker_keys, tables) as process:
        yield process.namesrv


@contextmanager
def trocket_process(
    root: Path, broker_keys: str = "", tables: str = "", *, repo: Path = REPO
) -> Iterator[TrocketProcess]:
    """As :func:`running_trocket`, yielding the process id too (for its CPU figures); ``repo``:
    the source tree the process runs (another revision's checkout for an A/B)."""
    namesrv_port, broker_port = free_port(), free_port()
    config = root / "trocket.toml"
    config.write_text(
        f'[broker]\ndata_dir = "{root / "data"}"\nlisten_port = {broker_port}\n'
        f'namesrv_addr = ["127.0.0.1:{namesrv_port}"]\n{broker_keys}\n'
        f"[namesrv]\nlisten_port = {namesrv_port}\n{tables}\n"
    )
    log = root / "broker.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "trocket", "up", "-c", str(config)], stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(repo)}, cwd=repo,  # ``-m`` imports from the cwd first
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while "ready" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit("trocket up did not start:\n" + log.read_text())
        time.sleep(0.05)
    try:
        yield TrocketProcess(f"127.0.0.1:{namesrv_port}", process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
