"""Zeros written ahead of the appends (``[store_mmap] warm_mapped_file``): a file the log creates
ahead is warmed to its end, so its blocks are written ones (the file system says so); appends
that reach the warmer stop it and lose nothing; a broker that warms says so in its runtime
figures. The crash test (``test_crash.py``) kills brokers that warm under load."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import trio

from kernel import Broker, Message, MessageBatch, pull
from kernel.model import GetStatus
from kernel.testing import make_config
from plugins.store_mmap import warm
from plugins.store_mmap.mapped_file import MappedFile
from plugins.store_mmap.mapped_file_queue import MappedFileQueue
from plugins.store_mmap.warm import CHUNK, GENTLE_PAUSE, MARGIN, PAUSE, WARMER, FileWarmer, WarmJob
from wire import record

FILE_SIZE = 8 * CHUNK


def unwritten_blocks(path: Path) -> int | None:
    """Blocks of ``path`` in unwritten extents (allocated, never written), from ``filefrag``;
    None where the tool or the file system cannot tell."""
    tool = shutil.which("filefrag") or shutil.which("filefrag", path="/usr/sbin:/sbin")
    if tool is None:
        return None
    out = subprocess.run([tool, "-v", str(path)], capture_output=True, text=True, check=False)
    if out.returncode != 0 or "logical_offset" not in out.stdout:
        return None
    blocks = 0
    for line in out.stdout.splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[0].strip().isdigit() and "unwritten" in line:
            blocks += int(fields[3].split()[0])
    return blocks


def wait_idle(warmer: FileWarmer) -> None:
    deadline = time.monotonic() + 60
    while warmer.statistics().pending:
        assert time.monotonic() < deadline, f"warming did not finish: {warmer.statistics()}"
        time.sleep(0.01)


def test_files_created_ahead_are_warmed_to_their_end(tmp_path):
    control = MappedFileQueue.load(tmp_path / "control", FILE_SIZE)
    before = unwritten_blocks(control.writable_file().path)  # no warmer
    control.close()
    queue = MappedFileQueue.load(tmp_path / "log", FILE_SIZE)
    warmer = FileWarmer()
    queue.on_created = lambda mapped, appends_now: warmer.warm(mapped, MARGIN if appends_now else 0)
    try:
        active = queue.writable_file()  # created for an append now: warmed from a margin in
        queue.extend_to(2 * FILE_SIZE)  # the next file, created ahead: warmed whole
        ahead = queue.files[1]
        wait_idle(warmer)
        stats = warmer.statistics()
        assert (stats.files, stats.halted, stats.bytes) == (2, 0, 2 * FILE_SIZE - MARGIN)
        assert active.warming is None and ahead.warming is None
        assert os.pread(ahead._fd, FILE_SIZE, 0) == bytes(FILE_SIZE)
        if before is None:
            pytest.skip("filefrag cannot tell written from unwritten extents here")
        assert before == FILE_SIZE // 4096, "a file allocated and never written: all unwritten"
        assert unwritten_blocks(ahead.path) == 0, "warmed: every block written"
        assert unwritten_blocks(active.path) == MARGIN // 4096, "the margin stays for the appends"
    finally:
        warmer.close()
        queue.close()


def test_a_file_is_kept_ready_ahead_of_the_appends_so_none_is_appended_to_unwarmed(tmp_path):
    """``prepare_ahead`` (the store sets it with the warmer): the first append's file comes with
    the next one, warmed whole, so the roll lands in written blocks; the roll then prepares the
    one after. Without it the next file was created at the roll, with appends right behind, and
    its warming stopped at once (``halted``): the whole file was flushed the slower way."""
    queue = MappedFileQueue.load(tmp_path, FILE_SIZE)
    warmer = FileWarmer()
    queue.on_created = lambda mapped, appends_now: warmer.warm(mapped, MARGIN if appends_now else 0)
    queue.prepare_ahead = True
    try:
        first = queue.writable_file()
        assert [f.start for f in queue.files] == [0, FILE_SIZE], "the next file is ready at once"
        wait_idle(warmer)
        first.write(os.urandom(first.free))  # the appends fill the first file ...
        second = queue.roll(first)  # ... and move on into the one warmed ahead
        assert second is queue.files[1] and len(queue.files) == 3, "and the one after is made"
        wait_idle(warmer)
        stats = warmer.statistics()
        assert (stats.files, stats.halted) == (3, 0), stats
        blocks = unwritten_blocks(second.path)
        if blocks is None:
            pytest.skip("filefrag cannot tell written from unwritten extents here")
        assert blocks == 0, "the file rolled into was warmed whole"
    finally:
        warmer.close()
        queue.close()


def test_the_warmer_paces_gently_while_the_appends_are_far_behind(tmp_path, monkeypatch):
    """A sync flush that meets a chunk waits for it: the file ahead of a log filling slowly is
    warmed at a twentieth of the disk's time, and at a quarter once the appends come within half
    a file of what is left (they would otherwise reach unwarmed blocks). Each chunk's duration
    is one tick of a counting clock, so each pause is its factor."""
    queue = MappedFileQueue.load(tmp_path, FILE_SIZE)
    queue.writable_file()
    queue.extend_to(2 * FILE_SIZE)
    ahead = queue.files[1]
    ticks = itertools.count()
    monkeypatch.setattr(warm.time, "monotonic", lambda: float(next(ticks)))
    job = WarmJob(ahead, 0)
    appends = [0]  # the log's end: the start of the first file, a file and more behind the job
    pauses: list[float] = []

    class Closing:
        def is_set(self) -> bool:
            return False

        def wait(self, seconds: float) -> None:
            pauses.append(seconds)
            if len(pauses) >= 3:  # the appends catch up and trail the warmer by a chunk
                appends[0] = ahead.start + job.position - CHUNK

    warmer = FileWarmer(appends_at=lambda: appends[0])
    try:
        assert job.run(Closing(), PAUSE, lambda: appends[0]) == FILE_SIZE  # type: ignore[arg-type]
        assert pauses == [GENTLE_PAUSE] * 3 + [PAUSE] * 5
        # The figure says the same: a job the appends are a file behind is not near (its
        # thread pauses nineteen ticks of the counting clock after a chunk: it stays there).
        appends[0] = 0
        assert warmer.warm(ahead, 0) is not None
        assert (warmer.statistics().pending, warmer.statistics().near) == (1, 0)
        appends[0] = ahead.start  # the appends reach the file it warms
        assert warmer.statistics().near == 1
    finally:
        warmer.close()
        queue.close()


def test_appends_that_reach_the_warmer_stop_it_and_lose_nothing(tmp_path):
    """The warmer is a background thread pausing between chunks, the appends come as fast as
    ``pwrite`` goes: they catch up with it, halt it, and every byte they wrote reads back;
    past their end the file holds zeros."""
    queue = MappedFileQueue(tmp_path, 64 * CHUNK)
    warmer = FileWarmer()
    try:
        mapped = queue.writable_file()
        job = warmer.warm(mapped, MARGIN)
        assert job is not None and mapped.warming is job
        written = bytearray()
        while mapped.wrote + (64 << 10) <= 16 * CHUNK:
            data = os.urandom(64 << 10)
            mapped.write(data)
            written += data
        assert job.stopped, "the appends reached the warmer and stopped it"
        wait_idle(warmer)
        assert mapped.warming is None, "the warmer let go of the file"
        stats = warmer.statistics()
        assert stats.halted == 1 and stats.files == 0
        assert MARGIN <= job.position < mapped.size
        assert os.pread(mapped._fd, len(written), 0) == written
        rest = mapped.size - len(written)
        assert os.pread(mapped._fd, rest, len(written)) == bytes(rest)
    finally:
        warmer.close()
        queue.close()


def test_a_closing_store_stops_its_warmer(tmp_path):
    queue = MappedFileQueue(tmp_path, 256 * CHUNK)
    warmer = FileWarmer()
    mapped = queue.writable_file()
    warmer.warm(mapped, 0)
    queue.close()  # halts the job first: the file is closed only once the warmer let go
    warmer.close()
    stats = warmer.statistics()
    assert stats.pending == 0 and stats.files == 0 and mapped.warming is None


async def test_a_sync_flush_broker_warms_its_log_and_reports_it(tmp_path):
    """Through the kernel's put pipeline with 1 MiB log files: the files rolled into are warmed
    ahead of the appends, which stay whole after a restart."""
    config = make_config(
        broker={"plugins": ["store_mmap", "flush_sync"], "data_dir": str(tmp_path), "flush": "sync"},
        store_mmap={"commit_log_file_size": "1MiB", "warm_mapped_file": True, "message_index_enable": False},
    )
    broker = Broker.assemble(config)
    bodies = [os.urandom(2000) for _ in range(1500)]  # about 3 MiB: rolls into 3 more files
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        for body in bodies:
            result = await broker.put(MessageBatch([Message("Warm", body)]))
            assert result.ok, result
        warmer = broker.ctx.stash[WARMER]
        with trio.fail_after(60):
            while warmer.statistics().pending:  # noqa: ASYNC110 (a thread's figure, polled)
                await trio.sleep(0.01)
        stats = warmer.statistics()
        assert stats.files >= 2 and stats.bytes >= 2 << 20, stats
        broker.request_stop()
    assert broker.clean_stop
    broker = Broker.assemble(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        await broker.wait_dispatched()
        read: list[bytes] = []
        while True:
            got = await pull.get_messages(broker.store, "Warm", 0, len(read), max_count=500)
            if got.status is not GetStatus.FOUND:
                break
            read += [record.decode_record(raw).body for raw in got.records]
        assert read == bodies
        broker.request_stop()


async def test_a_broker_that_starts_warming_makes_a_file_ahead_of_its_log(tmp_path):
    """A log written without warming (one file, no file ahead), restarted with
    ``warm_mapped_file``: the restart makes the file after the active one and warms it in the
    background, so the log's first roll is into warmed blocks too."""

    def config(warming: bool) -> object:
        return make_config(
            broker={"plugins": ["store_mmap", "flush_sync"], "data_dir": str(tmp_path), "flush": "sync"},
            store_mmap={
                "commit_log_file_size": "1MiB",
                "warm_mapped_file": warming,
                "message_index_enable": False,
            },
        )

    broker = Broker.assemble(config(False))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        assert (await broker.put(MessageBatch([Message("Warm", b"x" * 1000)]))).ok
        broker.request_stop()
    log_dir = next(p.parent for p in tmp_path.rglob("00000000000000000000") if p.parent.name == "commitlog")
    assert sorted(p.name for p in log_dir.iterdir()) == ["00000000000000000000"]
    broker = Broker.assemble(config(True))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        warmer = broker.ctx.stash[WARMER]
        with trio.fail_after(60):
            while warmer.statistics().pending:  # noqa: ASYNC110 (a thread's figure, polled)
                await trio.sleep(0.01)
        assert sorted(p.name for p in log_dir.iterdir()) == ["00000000000000000000", "00000000000001048576"]
        stats = warmer.statistics()
        assert stats.files == 2 and stats.halted == 0, stats
        broker.request_stop()


def test_a_stalled_disk_holds_the_warmer_not_the_appends(tmp_path, monkeypatch):
    """The warmer's fdatasync hangs (a stalled disk, here an event the test holds): an append
    that reaches the warmer halts it without waiting for that call, while closing the file
    waits for it (its descriptor must outlive the call)."""
    stalled, release = threading.Event(), threading.Event()

    def stalling_datasync(self) -> None:
        stalled.set()
        release.wait()

    monkeypatch.setattr(MappedFile, "datasync", stalling_datasync)
    queue = MappedFileQueue.load(tmp_path, 8 * CHUNK)
    warmer = FileWarmer()
    try:
        mapped = queue.writable_file()
        job = warmer.warm(mapped, 0)
        assert job is not None and stalled.wait(10), "the warmer is in its fdatasync"
        data = os.urandom(2 * CHUNK)  # past the chunk being made durable: halts the warmer
        appender = threading.Thread(target=mapped.write, args=(data,))
        appender.start()
        appender.join(10)
        assert not appender.is_alive(), "the append waited for the stalled disk"
        assert job.stopped and os.pread(mapped._fd, len(data), 0) == data
        closer = threading.Thread(target=mapped.close)
        closer.start()
        closer.join(0.2)
        assert closer.is_alive(), "the file closed under the warmer's fdatasync"
        release.set()
        closer.join(10)
        assert not closer.is_alive()
    finally:
        release.set()
        warmer.close()
        queue.close()
