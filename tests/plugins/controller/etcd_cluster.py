"""Real etcd members on free loopback ports (Debian's ``etcd-server``), one or three, each a
process the tests can SIGKILL and restart."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest

from tests.network.conftest import free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def require_etcd() -> None:
    """Skip without etcd (``./run tests`` installs etcd-server; under CI a missing one fails)."""
    if not Path(ETCD).exists():
        if os.environ.get("CI"):
            pytest.fail("etcd is not installed: ./run tests installs Debian's etcd-server")
        pytest.skip("etcd is not installed (apt-get install etcd-server)")


@attrs.define
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self, initial_cluster: str, state: str = "new") -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    ETCD,
                    "--name",
                    self.name,
                    "--data-dir",
                    str(self.data_dir),
                    "--listen-client-urls",
                    f"http://{self.endpoint}",
                    "--advertise-client-urls",
                    f"http://{self.endpoint}",
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{self.peer_port}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{self.peer_port}",
                    "--initial-cluster",
                    initial_cluster,
                    "--initial-cluster-state",
                    state,
                    "--heartbeat-interval",
                    "100",
                    "--election-timeout",
                    "1000",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as answer:
                return b'"true"' in answer.read()
        except OSError:
            return False


@attrs.define
class EtcdCluster:
    members: list[EtcdMember]

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}=http://127.0.0.1:{m.peer_port}" for m in self.members)

    def wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(m.healthy() for m in self.members if m.process and m.process.poll() is None):
                return
            time.sleep(0.2)
        logs = "\n".join(m.log.read_text()[-2000:] for m in self.members)
        raise AssertionError(f"etcd not healthy within {timeout}s:\n{logs}")

    def restart(self, member: EtcdMember) -> None:
        member.kill()
        member.start(self.initial_cluster, state="existing")

    def stop(self) -> None:
        for member in self.members:
            member.kill()


MEMORY_DISK = Path("/dev/shm")
MEMORY_DISK_NEEDED = 1 << 30
"""Free bytes ``/dev/shm`` must have to be used: each member preallocates a 64 MB log segment
(a container's default ``/dev/shm`` of 64 MiB would not hold one member)."""


@contextmanager
def etcd_data_root(root: Path) -> Iterator[Path]:
    """Where the members keep their data: a directory on ``/dev/shm`` (removed after) when there
    is one with room, else ``root``. etcd fsyncs its log on every write, and these tests run beside a
    suite that keeps the disk busy: an fsync slower than the election timeout (1 s here) costs
    etcd its leader and the controllers their leases, a fault the tests did not ask for (CI
    once waited 60 s for a three-member set to form). Killed members keep their data there as
    on a disk; the tests that fault etcd do it by killing members."""
    usable = MEMORY_DISK.is_dir() and os.access(MEMORY_DISK, os.W_OK)
    if not usable or shutil.disk_usage(MEMORY_DISK).free < MEMORY_DISK_NEEDED:
        yield root
        return
    data = Path(tempfile.mkdtemp(prefix="trocket-etcd-", dir=MEMORY_DISK))
    try:
        yield data
    finally:
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def etcd_cluster(root: Path, size: int = 1) -> Iterator[EtcdCluster]:
    """``size`` members, healthy; logs in ``root``, data in :func:`etcd_data_root`."""
    require_etcd()
    with etcd_data_root(root) as data:
        members = [
            EtcdMember(f"m{i}", free_port(), free_port(), data / f"etcd-m{i}", root / f"etcd-m{i}.log")
            for i in range(size)
        ]
        cluster = EtcdCluster(members)
        try:
            for member in members:
                member.start(cluster.initial_cluster)
            cluster.wait_healthy()
            yield cluster
        finally:
            cluster.stop()
