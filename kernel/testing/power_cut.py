"""Power-cut simulation: what does an acknowledged message survive when the machine dies?

A process crash leaves the page cache behind; a power cut does not. To see the difference the
store lives on an ext4 filesystem inside an image file mounted through a loop device. Bytes the
filesystem sent to its "disk" are in the image file; bytes still dirty in the mounted
filesystem's page cache are not. A *cut* stops the writer (SIGSTOP, at a random point of its
work), copies the image file (what reached the disk), and lets the writer go on. Each copy is
later mounted, recovered by a real broker and compared with the acknowledgements the writer had
printed before the cut.

Needs root, ``mkfs.ext4`` and loop devices: :func:`unavailable_reason` says why not, so a test
can skip with that reason. Used by ``tests/durability`` and ``bench/power_cut.py``; a store or
flush plugin author can point it at their own plugins through the config tables.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import trio

from kernel import Broker, pull
from kernel.model import GetStatus
from kernel.testing.helpers import make_config
from kernel.testing.power_cut_writer import TOPIC, parse_body
from wire import record

REPO = Path(__file__).resolve().parents[2]


@attrs.frozen
class Ack:
    queue: int
    queue_offset: int
    physical: int
    producer: int
    sequence: int
    unix_ms: int


@attrs.frozen
class CutResult:
    """What one cut left, as found by recovery of its image copy."""

    number: int
    acked: int
    """Acknowledgements printed before the cut."""
    survived: int
    lost: tuple[Ack, ...]
    """Acknowledged messages missing after recovery (or replaced by other bytes)."""
    flushed_bound: int
    """The last flushed position the writer reported before the cut (a lower bound)."""
    recovered: int
    """Messages served by the recovered broker."""
    unacknowledged: int
    """Recovered messages whose acknowledgement had not been printed (written, not yet acked)."""
    corrupt: tuple[str, ...]
    """Served records that were not byte-identical to what was sent (must be empty)."""
    duplicates: int
    """Messages served twice (must be 0)."""
    holes: int
    """Acknowledged messages that survived although an earlier one in the log was lost (must
    be 0: recovery keeps a prefix of the log)."""
    clean_recovery: bool
    cut_at_ms: int

    @property
    def lost_below_flushed(self) -> tuple[Ack, ...]:
        """Losses a flush had already covered: must be empty under every policy."""
        return tuple(a for a in self.lost if a.physical < self.flushed_bound)

    @property
    def loss_window_ms(self) -> int:
        """How long before the cut the oldest lost message was acknowledged (0 if none)."""
        return max((self.cut_at_ms - a.unix_ms for a in self.lost), default=0)


def unavailable_reason() -> str | None:
    """Why loop-mounted images cannot be used here, or None if they can (probes for real)."""
    if os.geteuid() != 0:
        return "power-cut simulation needs root to mount loop devices"
    if shutil.which("mkfs.ext4") is None or shutil.which("mount") is None:
        return "power-cut simulation needs mkfs.ext4 and mount (e2fsprogs, util-linux)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices on this machine (/dev/loop-control is missing)"
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"trocket-loop-probe-{os.getpid()}"
    try:
        probe.mkdir(parents=True, exist_ok=True)
        image = LoopImage.create(probe / "probe.img", 8 << 20)
        with image.mounted(probe / "mnt"):
            pass
    except (OSError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", b"") or b""
        return f"cannot mount a loop image: {error} {detail.decode(errors='replace').strip()}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return None


@attrs.frozen
class LoopImage:
    """An ext4 filesystem in an image file."""

    path: Path

    @classmethod
    def create(cls, path: Path, size: int) -> LoopImage:
        with path.open("wb") as handle:
            handle.truncate(size)
        _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(path))
        return cls(path)

    @contextlib.contextmanager
    def mounted(self, mountpoint: Path) -> Iterator[Path]:
        """Mount (journal replay happens here for a copy of a live filesystem), yield, unmount."""
        mountpoint.mkdir(parents=True, exist_ok=True)
        _run("mount", "-o", "loop,noatime", str(self.path), str(mountpoint))
        try:
            yield mountpoint
        finally:
            unmount(mountpoint)

    def copy_to(self, path: Path) -> LoopImage:
        """What reached the disk: the image file as the loop device left it."""
        _run("cp", "--sparse=always", str(self.path), str(path))
        return LoopImage(path)


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def unmount(mountpoint: Path, patience: float = 10.0) -> None:
    """``umount``, tried again while the filesystem is busy: a SIGKILLed writer's io_uring is
    torn down by the kernel after the process is gone (an ``fdatasync`` it had submitted holds
    its file until it completes), so the mount can stay busy for a moment after ``wait``.

    :raises subprocess.CalledProcessError: any other failure (not mounted, ...), or still busy
        after ``patience`` seconds.
    """
    deadline = time.monotonic() + patience
    while True:
        try:
            _run("umount", str(mountpoint))
            return
        except subprocess.CalledProcessError as error:
            if b"busy" not in (error.stderr or b"") or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@attrs.define
class PowerCutRun:
    """A writer on a loop-mounted store, cut repeatedly; see the module docstring.

    ``tables`` are config tables for :func:`make_config`; ``broker.data_dir`` is set here.
    """

    workdir: Path
    tables: dict[str, Any]
    producers: int = 8
    queues: int = 4
    rate: float = 0.0
    """Puts per second per producer (0: as fast as the broker acknowledges)."""
    max_bytes: int = 32 << 20
    """The writer stops appending beyond this log size, so the image never fills up."""
    image_size: int = 160 << 20
    acks: list[Ack] = attrs.field(factory=list)
    flushed_bound: int = 0
    _image: LoopImage | None = None
    _process: subprocess.Popen[bytes] | None = None
    _pending: bytes = b""
    _ready: bool = False
    _cuts: int = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[PowerCutRun]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._image = LoopImage.create(self.workdir / "disk.img", self.image_size)
        with self._image.mounted(self.workdir / "live") as live:
            try:
                self._start(live / "store")
                yield self
            finally:
                self._stop()

    def _start(self, data_dir: Path) -> None:
        tables = _with_data_dir(self.tables, data_dir)
        spec = {
            "tables": tables,
            "producers": self.producers,
            "queues": self.queues,
            "rate": self.rate,
            "max_bytes": self.max_bytes,
        }
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "kernel.testing.power_cut_writer", json.dumps(spec)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        deadline = time.monotonic() + 60
        while not self._ready:
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"power-cut writer did not start (exit {self._process.returncode})")
            self._read(0.1)

    def _stop(self) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=30)
            assert self._process.stdout is not None
            self._process.stdout.close()
            self._process = None

    def run_for(self, seconds: float) -> None:
        """Let the writer work (reading its output so it never blocks on the pipe)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._read(left)
        self._check_alive()

    def cut(self, copy: Path, *, resume: bool = True) -> tuple[LoopImage, list[Ack], int, int]:
        """Stop the writer wherever it is, copy the image, let it continue (unless ``resume`` is
        false: then call :meth:`resume`). Returns the copy, the acknowledgements printed before
        the cut, the flushed bound and the cut time."""
        assert self._process is not None and self._image is not None
        self._check_alive()
        os.kill(self._process.pid, signal.SIGSTOP)
        try:
            cut_at = int(time.time() * 1000)
            self._drain()
            image = self._image.copy_to(copy)
        except BaseException:
            self.resume()
            raise
        if resume:
            self.resume()
        self._cuts += 1
        return image, list(self.acks), self.flushed_bound, cut_at

    def cut_and_verify(self, *, min_run: float = 0.1, max_run: float = 0.6) -> CutResult:
        """Run a random while, cut, and verify the copy (the writer is paused meanwhile, so the
        store does not grow while a copy is checked)."""
        self.run_for(random.uniform(min_run, max_run))
        number = self._cuts
        copy_path = self.workdir / f"cut-{number}.img"
        image, acks, bound, cut_at = self.cut(copy_path, resume=False)
        try:
            with image.mounted(self.workdir / f"cut-{number}") as mountpoint:
                result = trio.run(self._verify, number, mountpoint / "store", acks, bound, cut_at)
        finally:
            self.resume()
            copy_path.unlink(missing_ok=True)
        return result

    def resume(self) -> None:
        assert self._process is not None
        os.kill(self._process.pid, signal.SIGCONT)

    async def _verify(
        self, number: int, data_dir: Path, acks: list[Ack], bound: int, cut_at: int
    ) -> CutResult:
        broker = Broker.assemble(make_config(**_with_data_dir(self.tables, data_dir)))
        served: dict[tuple[int, int], tuple[int, int]] = {}
        corrupt: list[str] = []
        seen: set[tuple[int, int]] = set()
        duplicates = 0
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            assert broker.recovery is not None
            clean = broker.recovery.clean_shutdown
            await broker.wait_dispatched()
            for queue in range(self.queues):
                offset = broker.store.min_queue_offset(TOPIC, queue)
                while True:
                    got = await pull.get_messages(broker.store, TOPIC, queue, offset, max_count=256)
                    if got.status is not GetStatus.FOUND:
                        break
                    for raw, queue_offset in zip(got.records, got.queue_offsets, strict=True):
                        message = record.decode_record(raw)
                        key = parse_body(message.body)
                        if key is None or message.queue_offset != queue_offset:
                            corrupt.append(f"queue {queue} offset {queue_offset}: {message.body[:40]!r}")
                            continue
                        duplicates += key in seen
                        seen.add(key)
                        served[(queue, queue_offset)] = key
                    offset = got.next_begin_offset
            broker.request_stop("verified")
        acked_keys = {(a.producer, a.sequence) for a in acks}
        lost = tuple(a for a in acks if served.get((a.queue, a.queue_offset)) != (a.producer, a.sequence))
        first_lost = min((a.physical for a in lost), default=None)
        holes = 0 if first_lost is None else sum(a.physical > first_lost for a in acks) - len(lost) + 1
        return CutResult(
            number=number,
            acked=len(acks),
            survived=len(acks) - len(lost),
            lost=lost,
            flushed_bound=bound,
            recovered=len(served),
            unacknowledged=len(seen - acked_keys),
            corrupt=tuple(corrupt),
            duplicates=duplicates,
            holes=holes,
            clean_recovery=clean,
            cut_at_ms=cut_at,
        )

    # --- the writer's output ----------------------------------------------------------------

    def _check_alive(self) -> None:
        assert self._process is not None
        if self._process.poll() is not None:
            raise RuntimeError(f"power-cut writer exited with {self._process.returncode}")

    def _read(self, timeout: float) -> None:
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if ready:
            self._consume(fd)

    def _drain(self) -> None:
        """Read everything the (stopped) writer printed."""
        assert self._process is not None and self._process.stdout is not None
        self._consume(self._process.stdout.fileno())

    def _consume(self, fd: int) -> None:
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            parts = line.split()
            if parts[:1] == [b"ack"] and len(parts) == 7:
                self.acks.append(Ack(*(int(p) for p in parts[1:])))
            elif parts == [b"ready"]:
                self._ready = True
            elif parts[:1] == [b"flushed"]:
                self.flushed_bound = max(self.flushed_bound, int(parts[1]))


def _with_data_dir(tables: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    out = {name: dict(table) for name, table in tables.items()}
    out.setdefault("broker", {})["data_dir"] = str(data_dir)
    return out
