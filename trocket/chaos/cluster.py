"""A replicated Trocket deployment inside a :class:`~trocket.chaos.netlab.NetLab`: etcd
members, controllers, a NameServer and the replicas of one broker set, each a real process in
its own network namespace (so any path between two of them can be cut), plus a ``client`` host
for the run's producers and its observer.

Every process can be SIGKILLed, paused with SIGSTOP, restarted on its data, and started under
libfaketime with a wall clock the run moves (:meth:`LabCluster.set_clock_offset`). Addresses are
the lab's; ports are RocketMQ's defaults since every host has its own.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from kernel.testing.power_cut import LoopImage, unmount
from trocket.chaos.netlab import NetLab
from wire.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode

REPO = Path(__file__).resolve().parents[2]
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380
CONTROLLER_PORT, NAMESRV_PORT, BROKER_PORT, HA_PORT = 9878, 9876, 10911, 10912
LIBFAKETIME_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"
LIBFAKETIME_SHM = ("/dev/shm/faketime_shm_{pid}", "/dev/shm/sem.faketime_sem_{pid}")
"""What libfaketime 0.9.10 makes per process (its shared clock state) and removes only at a
normal exit: a SIGKILLed process leaves them."""

IMAGE_SIZE = 384 << 20
"""A replica's disk when it can lose power: a sparse ext4 image."""

FAST_TIMINGS = 'heartbeat_timeout = "2s"\nscan_interval = "200ms"\nlease_ttl = "2s"'
"""Controller timings shorter than RocketMQ's defaults, so a run fails over in about 3 s."""


FREEZER = Path("/sys/fs/cgroup/freezer")
"""The cgroup v1 freezer hierarchy (a cgroup v2 host would use cgroup.freeze instead)."""


def freezer_available() -> bool:
    return FREEZER.is_dir() and os.access(FREEZER, os.W_OK)


def libfaketime() -> str | None:
    """The preload library of Debian's faketime package, or None."""
    found = sorted(glob.glob(LIBFAKETIME_GLOB))
    return found[0] if found else None


class ClusterError(RuntimeError):
    """A process did not start (the message carries its log's tail)."""


def threads_stopped(pid: int, timeout: float) -> bool:
    """Whether every thread of ``pid`` is stopped (``T`` or ``t`` in its ``/proc`` stat) within
    ``timeout`` seconds; True when the process is gone. The kernel's io_uring workers
    (``iou-*``) are not stopped by signals and are left out: what they finish was not answered
    (the thread that answers is stopped)."""
    deadline = time.monotonic() + timeout
    while True:
        running = 0
        for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
            try:
                text = Path(stat).read_text()
            except OSError:
                continue  # the thread ended
            name, _, rest = text.rpartition(")")
            if name.split("(", 1)[-1].startswith("iou-"):
                continue
            if rest.split()[0] not in ("T", "t"):
                running += 1
        if not running:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)


@attrs.define(eq=False)
class LabProcess:
    name: str
    host: str
    argv: list[str]
    log: Path
    addr: str = ""
    env: dict[str, str] = attrs.field(factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def send_signal(self, number: int) -> None:
        if self.alive():
            assert self.popen is not None
            self.popen.send_signal(number)

    def kill(self) -> None:
        """SIGKILL, then :meth:`resume`: a process stopped by :meth:`pause` dies without running
        another instruction (SIGKILL acts on stopped processes), and a frozen one acts on it as
        it is thawed. Resumed first, a paused broker went on for a moment: a sync flush in the
        kernel's hands completed and its puts were answered after the power cut's copy of the
        disk was taken, acknowledgements the copy cannot hold (the S8-sync failure of
        2026-11-29, evening: six acknowledged sends lost, one per producer)."""
        if self.alive():
            assert self.popen is not None
            self.popen.send_signal(signal.SIGKILL)
            self.resume()  # a frozen process would never act on the SIGKILL, nor be reaped
            self.popen.wait(timeout=30)
        self._leave_freezer()

    def pause(self) -> None:
        """SIGSTOP: the process stops at once (it could see SIGCONT, a frozen one sees nothing)."""
        self.send_signal(signal.SIGSTOP)

    def pause_and_wait(self, timeout: float = 5.0) -> None:
        """:meth:`pause`, returning once every thread of the process has stopped: ``kill``
        returns before the signal reached them, and a broker still running answers sends whose
        bytes a copy of its disk made meanwhile lacks (the S8-sync failure of 2026-11-29)."""
        self.pause()
        if self.popen is not None and not threads_stopped(self.popen.pid, timeout):
            raise ClusterError(f"{self.name} did not stop within {timeout} s of SIGSTOP")

    def freeze(self) -> None:
        """The cgroup freezer: every thread stops where it is, in the kernel too, without a
        signal (``FREEZER`` must be writable: :func:`freezer_available`)."""
        if not self.alive():
            return
        assert self.popen is not None
        group = FREEZER / f"trocket-chaos-{self.popen.pid}"
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(self.popen.pid))
        (group / "freezer.state").write_text("FROZEN")

    def resume(self) -> None:
        """Undoes :meth:`pause` and :meth:`freeze`."""
        if self.popen is not None:
            state = FREEZER / f"trocket-chaos-{self.popen.pid}" / "freezer.state"
            if state.exists():
                state.write_text("THAWED")
        self.send_signal(signal.SIGCONT)

    def _leave_freezer(self) -> None:
        if self.popen is not None:
            group = FREEZER / f"trocket-chaos-{self.popen.pid}"
            if group.exists():
                group.rmdir()  # empty: the process is gone

    def tail(self, size: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-size:] if self.log.exists() else ""


@attrs.define(eq=False)
class LabCluster:
    """Start with :func:`lab_cluster`; every process is killed and the lab removed at exit."""

    lab: NetLab
    root: Path
    timings: str = FAST_TIMINGS
    etcd: list[LabProcess] = attrs.field(factory=list)
    controllers: list[LabProcess] = attrs.field(factory=list)
    namesrv: LabProcess | None = None
    replicas: dict[int, LabProcess] = attrs.field(factory=dict)
    broker_name: str = "broker-a"
    clock_files: dict[str, Path] = attrs.field(factory=dict)
    images: dict[str, LoopImage] = attrs.field(factory=dict)
    cuts: list[Path] = attrs.field(factory=list)
    faked_pids: list[int] = attrs.field(factory=list)
    """Processes started with libfaketime, whose shared-memory files :meth:`stop` removes."""

    # -- starting -------------------------------------------------------------------------

    def _spawn(self, process: LabProcess, ready: str | None) -> LabProcess:
        before = process.log.read_text(errors="replace").count(ready) if ready and process.log.exists() else 0
        env = {**os.environ, "PYTHONPATH": str(REPO), **process.env}
        with process.log.open("ab") as out:
            process.popen = subprocess.Popen(
                self.lab.command(process.host, process.argv), stdout=out, stderr=subprocess.STDOUT, env=env
            )
        if "LD_PRELOAD" in process.env:
            self.faked_pids.append(process.popen.pid)
        if ready is None:
            return process
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.log.read_text(errors="replace").count(ready) > before:
                return process
            if not process.alive():
                break
            time.sleep(0.05)
        process.kill()
        raise ClusterError(f"{process.name} did not start:\n{process.tail()}")

    def _trocket(
        self, name: str, host: str, command: str, config: str, *, faketime: bool = False, rate: float = 1.0
    ) -> LabProcess:
        path = self.root / f"{name}.toml"
        path.write_text(config)
        env = self._clock_env(host, rate) if faketime or rate != 1.0 else {}
        process = LabProcess(
            name,
            host,
            [sys.executable, "-m", "trocket", command, "-c", str(path)],
            self.root / f"{name}.log",
            env=env,
        )
        return self._spawn(process, "ready (Ctrl-C")

    def _clock_env(self, host: str, rate: float = 1.0) -> dict[str, str]:
        """libfaketime reading this host's clock file each second. At ``rate`` 1 the monotonic
        clock stays real (a wall-clock step, as NTP makes it, moves only ``time.time()``;
        libfaketime 0.9.10 then breaks Python's ``time.sleep`` with EINVAL, which the broker's
        processes never call: trio waits in epoll). Another ``rate`` skews every clock of the
        process from its start, as a fast or slow oscillator would: leases, timeouts and
        heartbeats run at that rate in real time."""
        library = libfaketime()
        if library is None:
            raise ClusterError("libfaketime is not installed (Debian's faketime; ./run tests installs it)")
        path = self.root / f"clock-{host}"
        path.write_text("+0\n" if rate == 1.0 else f"+0 x{rate}\n")
        self.clock_files[host] = path
        env = {
            "LD_PRELOAD": library,
            "FAKETIME_TIMESTAMP_FILE": str(path),
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_RESET": "1",
        }
        if rate == 1.0:
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        return env

    def set_clock_offset(self, host: str, seconds: float) -> None:
        """Step the wall clock of the process on ``host`` (started with ``faketime=True``) to
        real time + ``seconds``; it is re-read within a second or so."""
        self.clock_files[host].write_text(f"{seconds:+.3f}\n")

    def start_etcd(self, members: int = 3) -> None:
        hosts = [self.lab.add_host(f"etcd{i}") for i in range(members)]
        initial = ",".join(f"{h.name}=http://{h.endpoint(ETCD_PEER_PORT)}" for h in hosts)
        for host in hosts:
            argv = [
                "etcd", "--name", host.name, "--data-dir", str(self.root / host.name),
                "--listen-client-urls", f"http://{host.endpoint(ETCD_CLIENT_PORT)}",
                "--advertise-client-urls", f"http://{host.endpoint(ETCD_CLIENT_PORT)}",
                "--listen-peer-urls", f"http://{host.endpoint(ETCD_PEER_PORT)}",
                "--initial-advertise-peer-urls", f"http://{host.endpoint(ETCD_PEER_PORT)}",
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--heartbeat-interval", "100", "--election-timeout", "1000",
            ]  # fmt: skip
            process = LabProcess(host.name, host.name, argv, self.root / f"{host.name}.log")
            process.addr = host.endpoint(ETCD_CLIENT_PORT)
            self.etcd.append(self._spawn(process, None))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all("ready to serve client requests" in p.tail(10**7) for p in self.etcd):
                return
            time.sleep(0.1)
        raise ClusterError("etcd did not become ready:\n" + "\n".join(p.tail() for p in self.etcd))

    def restart_etcd(self, index: int) -> None:
        member = self.etcd[index]
        member.kill()
        member.argv[member.argv.index("new")] = "existing"
        self._spawn(member, None)

    def start_controllers(self, count: int = 2, *, faketime: bool = False) -> None:
        endpoints = json.dumps([p.addr for p in self.etcd])
        for i in range(count):
            host = self.lab.add_host(f"ctl{i}")
            config = (
                f'[broker]\nplugins = ["controller"]\ndata_dir = "{self.root / host.name}"\n\n'
                f'[controller]\nlisten_host = "{host.address}"\nlisten_port = {CONTROLLER_PORT}\n'
                f"etcd_endpoints = {endpoints}\n{self.timings}\n"
            )
            process = self._trocket(host.name, host.name, "controller", config, faketime=faketime)
            process.addr = host.endpoint(CONTROLLER_PORT)
            self.controllers.append(process)

    def start_namesrv(self) -> None:
        host = self.lab.add_host("namesrv")
        config = f'[namesrv]\nlisten_host = "{host.address}"\nlisten_port = {NAMESRV_PORT}\n'
        self.namesrv = self._trocket("namesrv", host.name, "namesrv", config)
        self.namesrv.addr = host.endpoint(NAMESRV_PORT)

    def start_replica(
        self,
        broker_id: int,
        *,
        role: str = "SYNC_MASTER",
        flush: str = "flush_async",
        ha: str = "",
        catchup: str = "3s",
        faketime: bool = False,
        clock_rate: float = 1.0,
        disk_image: bool = False,
        plugins: tuple[str, ...] = (),
        store: str = "mmap",
    ) -> LabProcess:
        """``disk_image``: the data directory is an ext4 image on a loop device, so
        :meth:`power_cut` can keep only what reached the disk."""
        name = f"r{broker_id}"
        host = self.lab.hosts.get(name) or self.lab.add_host(name)
        assert self.namesrv is not None, "start the NameServer first"
        if disk_image:
            image = LoopImage.create(self.root / f"{name}.img", IMAGE_SIZE)
            _mount(image, self.root / name)
            self.images[name] = image
        plugin_list = json.dumps(["store_mmap", flush, "remoting", "ha", "retry_dlq", *plugins])
        config = f"""
[broker]
plugins = {plugin_list}
store = "{store}"
replicator = "ha"
flush = "{flush.removeprefix("flush_")}"
broker_role = "{role}"
broker_id = {broker_id}
broker_name = "{self.broker_name}"
data_dir = "{self.root / name}"
listen_host = "{host.address}"
listen_port = {BROKER_PORT}
namesrv_addr = ["{self.namesrv.addr}"]
graceful_timeout = "5s"

[store_mmap]
commit_log_file_size = "4MiB"

[remoting]
register_period = "2s"
slave_sync_interval = "1s"

[ha]
listen_port = {HA_PORT}
heartbeat_interval = "1s"
reconnect_interval = "500ms"
controller_mode = true
controller_addr = {json.dumps([c.addr for c in self.controllers])}
max_time_slave_not_catchup = "{catchup}"
{ha}
"""
        process = self._trocket(name, name, "broker", config, faketime=faketime, rate=clock_rate)
        process.addr = host.endpoint(BROKER_PORT)
        self.replicas[broker_id] = process
        return process

    def restart(self, process: LabProcess) -> None:
        """The process killed (if alive) and started again on its data and config."""
        process.kill()
        self._spawn(process, "ready (Ctrl-C")

    def power_cut(self, broker_id: int) -> None:
        """The replica loses power: stopped mid-work, and its disk becomes what the loop device
        had received (the filesystem's dirty page cache is gone, as in
        :mod:`kernel.testing.power_cut`); the process is killed, not restarted."""
        process = self.replicas[broker_id]
        image = self.images[process.name]
        process.pause_and_wait()
        cut = image.copy_to(image.path.with_name(f"{image.path.stem}-cut{len(self.cuts)}.img"))
        process.kill()
        _umount(self.root / process.name)
        _mount(cut, self.root / process.name)
        self.images[process.name] = cut
        self.cuts.append(cut.path)

    def fill_disk(self, broker_id: int, leave: int = 0) -> int:
        """The replica's filesystem (a ``disk_image``) filled up to ``leave`` free bytes by a
        file beside its data; returns the bytes taken. :meth:`free_disk` gives them back."""
        data_dir = self.root / self.replicas[broker_id].name
        stats = os.statvfs(data_dir)
        size = max(0, stats.f_bavail * stats.f_frsize - leave)
        with (data_dir / "disk-filler").open("wb") as filler:
            os.posix_fallocate(filler.fileno(), 0, size)
        return size

    def free_disk(self, broker_id: int) -> None:
        (self.root / self.replicas[broker_id].name / "disk-filler").unlink(missing_ok=True)

    def set_disk_fault(self, broker_id: int, fault: str) -> None:
        """The replica's fsync behaviour (``trocket.chaos.faulty_disk``): ``"delay SECONDS"``,
        ``"fail"`` or ``""`` (healthy)."""
        (self.root / f"{self.replicas[broker_id].name}.disk-fault").write_text(fault + "\n")

    def corrupt_tail(self, broker_id: int, rng: random.Random, *, flips: int = 16, torn: int = 4096) -> int:
        """Bit flips in the last 64 KiB of the (killed) replica's commit log and the last
        ``torn`` bytes zeroed (a write that never reached the disk); returns the log's data end."""
        process = self.replicas[broker_id]
        if process.alive():
            raise ClusterError(f"{process.name} is running: kill it before corrupting its files")
        files = sorted((self.root / process.name / "commitlog").iterdir())
        for path in reversed(files):
            data = bytearray(path.read_bytes())
            end = len(data.rstrip(b"\0"))
            if end == 0:
                continue
            region = max(0, end - 65536)
            for _ in range(flips):
                position = rng.randrange(region, end)
                data[position] ^= 1 << rng.randrange(8)
            data[max(region, end - torn) : end] = bytes(min(torn, end - region))
            path.write_bytes(bytes(data))
            return end
        return 0

    def processes(self) -> list[LabProcess]:
        return [
            *self.replicas.values(),
            *([self.namesrv] if self.namesrv else []),
            *self.controllers,
            *self.etcd,
        ]

    def stop(self) -> None:
        for process in self.processes():
            process.kill()
        for name in list(self.images):
            with contextlib.suppress(subprocess.CalledProcessError):  # tearing down: best effort
                _umount(self.root / name)
            del self.images[name]
        for pid in self.faked_pids:
            for pattern in LIBFAKETIME_SHM:
                Path(pattern.format(pid=pid)).unlink(missing_ok=True)
        self.faked_pids.clear()

    # -- observing (from a task inside the lab: see NetLab.run_inside) ----------------------

    async def replica_info(self) -> dict[str, Any]:
        """The set's replica info from the first controller that answers ({} when none does)."""
        async with RemotingClient.open() as client:
            for controller in self.controllers:
                request = RemotingCommand.request(
                    RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": self.broker_name}
                )
                try:
                    with trio.move_on_after(2):
                        answer = await client.invoke(controller.addr, request, 2)
                        if answer.code == ResponseCode.SUCCESS:
                            return {**answer.ext, **json.loads(answer.body or b"{}")}
                except Exception:  # noqa: BLE001, S112 - a dead or cut controller: ask the next
                    continue
        return {}

    async def sync_state_set(self) -> list[int]:
        """The controller's SyncStateSet of the set, sorted ([] when no controller answers)."""
        return sorted(int(i) for i in (await self.replica_info()).get("syncStateSet", ()))

    async def broker_role(self, broker_id: int) -> dict[str, str]:
        """The replica's runtime figures (brokerRole, haMasterEpoch, ...), {} when it does not answer."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {})
        async with RemotingClient.open() as client:
            try:
                with trio.move_on_after(2):
                    answer = await client.invoke(self.replicas[broker_id].addr, request, 2)
                    if answer.code == ResponseCode.SUCCESS:
                        table = json.loads(answer.body).get("table", {})
                        return {str(k): str(v) for k, v in table.items()}
            except Exception:  # noqa: BLE001 - a dead or cut replica
                return {}
        return {}

    async def wait_master(self, *, not_ids: Sequence[int] = (), in_set: int = 1, timeout: float = 60) -> int:
        """The master's broker id once the controller names it, it serves as master at the
        controller's epoch, and its SyncStateSet has ``in_set`` members."""
        with trio.fail_after(timeout):
            while True:
                info = await self.replica_info()
                master = info.get("masterBrokerId")
                if master not in (None, "") and int(master) not in not_ids and int(master) in self.replicas:
                    if len(info.get("syncStateSet", ())) >= in_set:
                        figures = await self.broker_role(int(master))
                        if figures.get("brokerRole") != "SLAVE" and figures.get("haMasterEpoch") == str(
                            info.get("masterEpoch")
                        ):
                            return int(master)
                await trio.sleep(0.2)


def _mount(image: LoopImage, mountpoint: Path) -> None:
    mountpoint.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-o", "loop,noatime", str(image.path), str(mountpoint)], check=True, capture_output=True
    )


def _umount(mountpoint: Path) -> None:
    """Unmount, waiting out a busy moment (a killed broker's io_uring released after it
    exited, see :func:`kernel.testing.power_cut.unmount`); nothing mounted there is fine."""
    try:
        unmount(mountpoint)
    except subprocess.CalledProcessError as error:
        if b"not mounted" not in (error.stderr or b"") and b"no mount point" not in (error.stderr or b""):
            raise
