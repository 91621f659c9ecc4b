"""The commit log's syncs through io_uring: real syncs of real files, errors as OSError, the
flush thread's waiting policy (block briefly, never for a stalled disk), and the store's choice
between the ring and the thread (``[store_mmap] sync_with``)."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import threading
import time
from pathlib import Path

import pytest
import trio

from kernel import Broker, Message, MessageBatch
from kernel.errors import ConfigError
from kernel.put_alone import PUT_ALONE
from kernel.testing import make_config
from kernel.unawaited_flush import FLUSH_UNAWAITED
from plugins.store_mmap import ring_sync
from plugins.store_mmap import store as store_module
from plugins.store_mmap.flush_thread import BLOCK_LIMIT
from plugins.store_mmap.mapped_file import MappedFile
from plugins.store_mmap.ring_sync import Ring, RingOp, RingUnavailable, open_ring
from tests.plugins.store_mmap.helpers import loop_gaps_while


def completions_waiting(ring: Ring) -> int:
    """Completions in the ring's queue not yet consumed (read, not consumed: the ring's own
    reaping must still find them)."""
    head = struct.unpack_from("<I", ring._cq, ring._cq_head)[0]
    tail = struct.unpack_from("<I", ring._cq, ring._cq_tail)[0]
    return (tail - head) & 0xFFFFFFFF


def ring_or_skip(*, spin: bool = True) -> Ring:
    try:
        return open_ring(spin=spin)
    except RingUnavailable as error:  # the store falls back to its flush thread there
        pytest.skip(f"io_uring unavailable: {error.strerror}")


@pytest.fixture(params=["spin", "sleep"])
def ring(request):
    """A ring of each way of blocking (``[store_mmap] sync_wait``): every promise below holds
    for both."""
    ring = ring_or_skip(spin=request.param == "spin")
    yield ring
    ring.close()


@pytest.mark.parametrize("alone", [True, False], ids=["lone put", "other puts"])
async def test_a_spinning_ring_yields_its_cpu_for_a_lone_put_and_sleeps_otherwise(ring, monkeypatch, alone):
    """``spin`` looks at the completion queue between ``sched_yield`` calls while the put being
    synced is alone (:data:`~kernel.put_alone.PUT_ALONE`; the kernel's worker may need this
    CPU); for any other put, and always with ``sleep``, the ring waits in the system call and
    never yields (other connections' work wants the CPU the spin would take)."""
    yields: list[int] = []
    real_yield = os.sched_yield
    monkeypatch.setattr(os, "sched_yield", lambda: yields.append(1) or real_yield())
    token = PUT_ALONE.set(alone)
    try:
        with pytest.raises(OSError) as raised:
            await ring.run(RingOp.sleep(0.0005))  # pending for 0.5 ms: under the block limit
    finally:
        PUT_ALONE.reset(token)
    assert raised.value.errno == errno.ETIME
    assert ring.waits.blocked + ring.waits.awaited == 1
    assert (len(yields) > 0) == (ring.spin and alone)


async def test_a_sync_of_written_bytes_completes_and_is_counted(ring, tmp_path):
    """How each sync was waited for depends on the disk and the machine's load (a loaded CI
    machine's syncs can all take longer than the block limit); that each completed and was
    counted once does not."""
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for position in range(0, 20 * 300, 300):
            os.pwrite(fd, b"x" * 300, position)
            await ring.datasync(fd)
    finally:
        os.close(fd)
    assert ring.waits.blocked + ring.waits.awaited == 20
    assert ring.figures() == {
        "commitLogSyncsBlocked": str(ring.waits.blocked),
        "commitLogSyncsAwaited": str(ring.waits.awaited),
        "commitLogSyncsStartedEarly": "0",
        "commitLogSyncOverflowFlushes": "0",
        "commitLogSyncWait": "spin" if ring.spin else "sleep",
    }


async def test_an_operation_done_at_submission_is_waited_for_by_blocking(ring):
    """A no-op completes inside the submitting system call, so the loop's blocking wait finds
    it at once whatever the load: the policy blocks while recent operations were fast."""
    for _ in range(5):
        assert await ring.run(RingOp.nop()) == 0
    assert ring.waits.blocked == 5 and ring.waits.awaited == 0


async def test_a_failed_sync_raises_its_errno_and_the_ring_keeps_serving(ring, tmp_path):
    fd = os.open(tmp_path / "closed", os.O_RDWR | os.O_CREAT, 0o644)
    os.close(fd)
    with pytest.raises(OSError) as raised:
        await ring.datasync(fd)
    assert raised.value.errno == errno.EBADF
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(OSError) as raised:
            await ring.datasync(read_end)  # a pipe cannot be synced
        assert raised.value.errno == errno.EINVAL
    finally:
        os.close(read_end)
        os.close(write_end)
    assert await ring.run(RingOp.nop()) == 0


async def test_a_slow_operation_holds_the_event_loop_no_longer_than_the_block_limit(ring):
    """While an operation takes 0.3 s (a stalled disk's sync), another task keeps running:
    the loop was blocked for about ``BLOCK_LIMIT`` at most, not for the operation."""

    async def slow() -> None:
        started = time.perf_counter()
        with pytest.raises(OSError) as raised:
            await ring.run(RingOp.sleep(0.3))
        assert raised.value.errno == errno.ETIME  # a timeout completes with ETIME
        assert time.perf_counter() - started >= 0.29

    gaps = await loop_gaps_while(slow)
    assert ring.waits.awaited == 1
    assert len(gaps) > 50, "the ticker ran while the operation was pending"
    assert max(gaps) < 0.1


async def test_while_operations_run_slow_the_loop_does_not_block_at_all(ring):
    with pytest.raises(OSError):
        await ring.run(RingOp.sleep(0.05))
    assert ring.waits.recent_seconds > BLOCK_LIMIT
    assert await ring.run(RingOp.nop()) == 0
    assert ring.waits.awaited == 2 and ring.waits.blocked == 0


async def test_meanwhile_runs_after_the_submission_and_before_the_wait(ring):
    """The work handed to ``run`` runs while the operation is in the kernel's hands: here a
    0.5 ms operation (shorter than the block limit) is still pending when the work looks, and
    the call returns after both, having blocked for the rest."""
    seen: list[bool] = []

    def meanwhile() -> None:
        seen.append(completions_waiting(ring) == 0)

    started = time.perf_counter()
    with pytest.raises(OSError) as raised:
        await ring.run(RingOp.sleep(0.0005), meanwhile)
    assert raised.value.errno == errno.ETIME
    assert seen == [True]
    assert time.perf_counter() - started >= 0.0004
    assert ring.waits.blocked == 1
    assert await ring.run(RingOp.nop(), meanwhile) == 0  # the ring serves on
    # The work runs for every wait the loop blocks for, and only then: whether this one was
    # blocked for depends on how long the first took to be reaped on a loaded machine.
    assert len(seen) == ring.waits.blocked


async def test_meanwhile_does_not_turn_a_slow_operation_into_a_long_block(ring):
    """The wait after the work keeps the block limit: a stalled sync is then waited for
    through the eventfd, the loop free."""
    calls: list[float] = []

    async def slow() -> None:
        with pytest.raises(OSError):
            await ring.run(RingOp.sleep(0.3), lambda: calls.append(time.perf_counter()))

    gaps = await loop_gaps_while(slow)
    assert len(calls) == 1
    assert ring.waits.awaited == 1
    assert max(gaps) < 0.1


async def test_meanwhile_is_skipped_while_operations_run_slow(ring):
    """Only a wait the loop blocks for has room for work: while recent operations were slow
    the loop awaits them and does its work in its own tasks."""
    with pytest.raises(OSError):
        await ring.run(RingOp.sleep(0.05))
    calls: list[int] = []
    assert await ring.run(RingOp.nop(), lambda: calls.append(1)) == 0
    assert calls == []


async def test_an_operation_no_put_waits_for_is_awaited_without_holding_the_loop(ring):
    """In a task marked FLUSH_UNAWAITED (an interval flush) the loop does not block at all: the
    work for blocking waits is not run, the operation is counted awaited, and another task runs
    while it is pending. An unmarked caller of the same operation takes the blocking path (its
    work runs). The operation lasts 50 ms so that it is surely pending after its submission,
    whatever the machine's load."""
    seen_pending: list[bool] = []
    meanwhile_calls: list[int] = []
    started = finished = False

    async def other() -> None:
        while not finished:
            seen_pending.append(started)  # False before the operation, True only while it runs
            await trio.lowlevel.checkpoint()

    async def unawaited() -> None:
        nonlocal started, finished
        FLUSH_UNAWAITED.set(True)  # this task's own context only
        started = True
        with pytest.raises(OSError) as raised:
            await ring.run(RingOp.sleep(0.05), lambda: meanwhile_calls.append(1))
        finished = True
        assert raised.value.errno == errno.ETIME

    async with trio.open_nursery() as nursery:
        nursery.start_soon(unawaited)
        nursery.start_soon(other)
    assert True in seen_pending, "the other task ran while the operation was pending"
    assert meanwhile_calls == []
    assert ring.waits.awaited == 1 and ring.waits.blocked == 0
    assert not FLUSH_UNAWAITED.get(), "the mark stays in the flushing task"
    ring.waits.recent_seconds = 0.0  # the policy forgets the slow one: it would block again
    with pytest.raises(OSError):
        await ring.run(RingOp.sleep(0.05), lambda: meanwhile_calls.append(1))
    assert meanwhile_calls == [1], "an unmarked caller takes the blocking path"


async def test_a_cancelled_caller_still_waits_for_its_operation(ring):
    """The flushed position depends on the sync having finished: as with the flush thread,
    cancelling the caller does not abandon a submitted operation."""
    started = time.perf_counter()
    with trio.move_on_after(0.01), pytest.raises(OSError):
        await ring.run(RingOp.sleep(0.1))
    assert time.perf_counter() - started >= 0.09


async def test_concurrent_callers_each_get_their_own_completion(ring, tmp_path):
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT, 0o644) for i in range(4)]
    results: list[str] = []

    async def sync(fd: int) -> None:
        os.pwrite(fd, b"y" * 100, 0)
        await ring.datasync(fd)
        results.append("synced")

    async def slow() -> None:
        with pytest.raises(OSError):
            await ring.run(RingOp.sleep(0.05))
        results.append("slept")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            for fd in fds:
                nursery.start_soon(sync, fd)
    finally:
        for fd in fds:
            os.close(fd)
    assert sorted(results) == ["slept"] + ["synced"] * 4


def runtime_figures(broker: Broker) -> dict[str, str]:
    """What ``brokerStatus`` shows (every plugin's ``trocket_runtime_figures``)."""
    return {k: v for part in broker.ctx.hook.trocket_runtime_figures(ctx=broker.ctx) for k, v in part.items()}


def sync_store_config(data_dir, sync_with: str, sync_wait: str = "spin"):
    return make_config(
        broker={"plugins": ["store_mmap", "flush_sync"], "data_dir": str(data_dir), "flush": "sync"},
        store_mmap={
            "commit_log_file_size": "1MiB",
            "message_index_enable": False,
            "sync_with": sync_with,
            "sync_wait": sync_wait,
        },
    )


@pytest.mark.parametrize(
    ("sync_with", "sync_wait"), [("io_uring", "spin"), ("io_uring", "sleep"), ("thread", "spin")]
)
async def test_sync_puts_are_flushed_through_the_chosen_path_and_survive_a_restart(
    tmp_path, sync_with, sync_wait
):
    if sync_with == "io_uring":
        ring_or_skip().close()
    broker = Broker.assemble(sync_store_config(tmp_path, sync_with, sync_wait))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        for n in range(50):
            result = await broker.put(MessageBatch([Message("Synced", f"m{n}".encode(), queue_id=0)]))
            assert result.ok, result.remark
        assert broker.store.positions.flushed.value == broker.store.positions.wrote.value
        figures = runtime_figures(broker)
        assert figures["commitLogSyncWith"] == sync_with
        if sync_with == "io_uring":
            assert int(figures["commitLogSyncsBlocked"]) + int(figures["commitLogSyncsAwaited"]) >= 50
            assert figures["commitLogSyncWait"] == sync_wait
            # Each put led its flush and started its sync before the flush call (the leader's
            # early start: the disk works while the loop walks to the ring).
            assert figures["commitLogSyncsStartedEarly"] == "50"
            assert broker.statistics().flush.started_early == 50
        else:
            assert "commitLogSyncWait" not in figures  # the flush thread always sleeps
            assert broker.statistics().flush.started_early == 0  # its sync cannot start early
        broker.request_stop()
    again = Broker.assemble(sync_store_config(tmp_path, sync_with))
    async with trio.open_nursery() as nursery:
        await nursery.start(again.run)
        assert again.store.max_queue_offset("Synced", 0) == 50
        again.request_stop()


async def test_auto_falls_back_to_the_thread_and_io_uring_names_why_it_cannot_start(tmp_path, monkeypatch):
    def refused(*, spin: bool = True) -> Ring:
        raise RingUnavailable(errno.EPERM, "io_uring_setup: Operation not permitted")

    monkeypatch.setattr(store_module, "open_ring", refused)
    broker = Broker.assemble(sync_store_config(tmp_path / "auto", "auto"))
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        assert (await broker.put(MessageBatch([Message("T", b"m", queue_id=0)]))).ok
        assert runtime_figures(broker)["commitLogSyncWith"] == "thread"
        broker.request_stop()
    strict = Broker.assemble(sync_store_config(tmp_path / "strict", "io_uring"))
    with pytest.raises(ConfigError, match=r"sync_with.*io_uring is unavailable here.*not permitted"):
        await strict.run()


async def test_the_async_policys_interval_flushes_never_hold_the_loop(tmp_path):
    """``flush = "async"``: the loop flushes what puts appended, and no put waits for those
    flushes, so every sync is awaited, none blocked for (``brokerStatus`` shows both counts)."""
    ring_or_skip().close()
    config = make_config(
        broker={"plugins": ["store_mmap", "flush_async"], "data_dir": str(tmp_path), "flush": "async"},
        store_mmap={"commit_log_file_size": "1MiB", "message_index_enable": False, "sync_with": "io_uring"},
        flush_async={"interval": "5ms", "least_pages": 0, "thorough_interval": "5ms"},
    )
    broker = Broker.assemble(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        for _ in range(5):
            assert (await broker.put(MessageBatch([Message("Interval", b"x" * 3000, queue_id=0)]))).ok
            with trio.fail_after(10):
                while broker.store.positions.flushed.value < broker.store.positions.wrote.value:  # noqa: ASYNC110
                    await trio.sleep(0.002)
        figures = runtime_figures(broker)
        assert int(figures["commitLogSyncsAwaited"]) >= 5
        assert figures["commitLogSyncsBlocked"] == "0"
        broker.request_stop()


async def test_a_started_sync_is_submitted_at_once_and_finished_later(ring, tmp_path):
    """``start`` submits without waiting (the worker syncs while the caller goes on); ``finish``
    waits for that completion and counts the wait once. While one is started, nothing else
    starts; a token is finished once."""
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"x" * 300, 0)
        token = ring.start(RingOp.datasync(fd))
        assert token is not None
        assert ring.start(RingOp.nop()) is None, "one started operation at a time"
        with trio.fail_after(5):
            while completions_waiting(ring) == 0:  # noqa: ASYNC110 (done without anyone waiting in the ring)
                await trio.sleep(0.001)
        assert await ring.finish(token) == 0
        assert ring.waits.blocked + ring.waits.awaited == 1
        assert ring.figures()["commitLogSyncsStartedEarly"] == "1"
        with pytest.raises(ValueError, match="no started operation"):
            await ring.finish(token)
    finally:
        os.close(fd)


async def test_meanwhile_runs_while_a_started_operation_is_pending(ring):
    """``finish`` runs the overlap work as ``run`` does: after the submission, before the
    completion is taken (the operation is still pending while it runs)."""
    seen: list[int] = []
    token = ring.start(RingOp.sleep(0.05))
    assert token is not None
    token_alone = PUT_ALONE.set(True)
    try:
        with pytest.raises(OSError) as raised:
            await ring.finish(token, lambda: seen.append(completions_waiting(ring)))
    finally:
        PUT_ALONE.reset(token_alone)
    assert raised.value.errno == errno.ETIME
    assert seen == [0]


async def test_a_run_meanwhile_first_settles_the_started_operation(ring, tmp_path):
    """An operation run while another was started (not finished) waits for the started one
    first, so one is in flight at a time and neither completion is lost: the started one's
    result, its error included, is what ``finish`` returns later."""
    token = ring.start(RingOp.datasync(987_654))  # no such descriptor: completes with EBADF
    assert token is not None
    assert await ring.run(RingOp.nop()) == 0
    with pytest.raises(OSError) as raised:
        await ring.finish(token)
    assert raised.value.errno == errno.EBADF
    assert ring.start(RingOp.nop()) is not None, "the ring is free to start again"


async def test_a_started_operation_of_a_closed_ring_fails_its_finish():
    ring = ring_or_skip()
    token = ring.start(RingOp.nop())
    assert token is not None
    ring.close()
    assert ring.start(RingOp.nop()) is None
    with pytest.raises(OSError) as raised:
        await ring.finish(token)
    assert raised.value.errno == errno.EBADF


async def test_a_file_sync_started_early_covers_what_was_written_before_it(ring, tmp_path):
    """``MappedFile.start_sync`` holds the file and starts its sync; ``flush_through`` waits for
    it, moves ``flushed`` to what the started sync covered, and syncs bytes written after it
    began with a sync of their own."""
    mapped = MappedFile.open(tmp_path / "00000000000000000000", 4096, create=True)
    try:
        mapped.write(b"a" * 100)
        assert mapped.start_sync(ring)
        assert not mapped.start_sync(ring), "one started sync at a time"
        assert mapped._refs == 1, "held while its sync is started: the descriptor stays open"
        mapped.write(b"b" * 50)  # after the start: not covered by it
        runs: list[str] = []
        assert await mapped.flush_through(ring, lambda: runs.append("overlap")) == 150
        assert runs == ["overlap"], "the overlap ran once, during the started sync"
        assert mapped._refs == 0
        assert ring.waits.blocked + ring.waits.awaited == 2
        assert not mapped.start_sync(ring), "nothing left to sync"
    finally:
        mapped.close()


async def test_a_started_operation_whose_submission_failed_for_good_fails_its_finish(monkeypatch):
    """The kernel refused the started entry for the moment (EAGAIN), then for good when a
    later run sent it (EFAULT here): the ring closes, that run raises, and the started
    operation's finish raises EBADF (an OSError, as any failed sync), not a lookup error."""
    ring = ring_or_skip()
    refusals = iter([errno.EAGAIN, errno.EFAULT])
    real_call = ring_sync._call

    def refusing(number: int, *args: object) -> int:
        code = next(refusals, None)
        if number == ring_sync._SYS_IO_URING_ENTER and code is not None:
            ctypes.set_errno(code)
            return -1
        return real_call(number, *args)

    monkeypatch.setattr(ring_sync, "_call", refusing)
    token = ring.start(RingOp.nop())
    assert token is not None
    with pytest.raises(OSError) as run_error:
        await ring.run(RingOp.nop())
    assert run_error.value.errno == errno.EFAULT
    with pytest.raises(OSError) as finish_error:
        await ring.finish(token)
    assert finish_error.value.errno == errno.EBADF


def fill_completion_queue(ring: Ring) -> None:
    """Complete operations nobody reaps until the ring's completion queue is full (16 here):
    the next completion has to go to the kernel's overflow list."""
    while completions_waiting(ring) < ring._cq_mask + 1:
        ring._queue(RingOp.nop())
        assert ring_sync._call(ring_sync._SYS_IO_URING_ENTER, ring._fd, 1, 0, 0, None, 0) == 1


def overflowed_completions(ring: Ring) -> list[str]:
    """The completions in the kernel's overflow list, as ``/proc/self/fdinfo`` lists them."""
    text = Path(f"/proc/self/fdinfo/{ring._fd}").read_text()
    listed = text.split("CqOverflowList:", 1)[1].splitlines()[1:]
    return [line.strip() for line in listed if line.strip().startswith("user_data=")]


def drop_completions(ring: Ring) -> None:
    """Consume what the completion queue holds, as a reaper of other operations would."""
    struct.pack_into("<I", ring._cq, ring._cq_head, struct.unpack_from("<I", ring._cq, ring._cq_tail)[0])


def finished_within(ring: Ring, token: int, seconds: float, *, unawaited: bool, alone: bool) -> list[int]:
    """``ring.finish(token)`` on a loop of its own in a daemon thread: its result, or nothing
    when it did not return within ``seconds`` (a wait that is shielded, or a spin, cannot be
    timed out from inside)."""
    results: list[int] = []

    async def finish() -> None:
        FLUSH_UNAWAITED.set(unawaited)
        PUT_ALONE.set(alone)
        results.append(await ring.finish(token))

    thread = threading.Thread(target=trio.run, args=(finish,), daemon=True)
    thread.start()
    thread.join(seconds)
    return results


@pytest.mark.parametrize("wait", ["eventfd", "spin", "system call"])
def test_a_completion_left_in_the_kernels_overflow_list_is_fetched(wait):
    """A broker under sync flush (Linux 6.18) once waited for good for a sync whose completion
    the kernel had put in its overflow list while the completion queue itself was empty: the
    eventfd is not signalled for it and a spin on the queue never sees it. Every way of
    waiting now fetches it (``io_uring_enter`` with GETEVENTS) and counts the fetch."""
    ring = ring_or_skip(spin=wait == "spin")
    try:
        fill_completion_queue(ring)
        token = ring.start(RingOp.nop())
        assert token is not None
        drop_completions(ring)
        assert completions_waiting(ring) == 0
        assert overflowed_completions(ring) == [f"user_data={token}, res=0, flags=0"]
        assert finished_within(ring, token, 5, unawaited=wait == "eventfd", alone=wait == "spin") == [0]
        assert overflowed_completions(ring) == []
        fetched = "0" if wait == "system call" else "1"  # a blocking io_uring_enter fetches it itself
        assert ring.figures()["commitLogSyncOverflowFlushes"] == fetched
        assert trio.run(ring.run, RingOp.nop()) == 0, "the ring serves on"
    finally:
        ring.close()


async def test_a_completion_the_kernel_dropped_fails_its_operation_instead_of_a_wait_for_good():
    """The kernel drops a completion only when it cannot allocate its overflow entry, and says
    so in the completion ring's overflow counter: the operation in flight (there is one at a
    time) fails with EIO, which turns the store read-only, rather than being waited for
    forever. Simulated by raising the counter while an operation is pending."""
    ring = ring_or_skip()
    try:
        token = ring.start(RingOp.sleep(30))  # pending until its timeout: nothing reaps it
        assert token is not None
        dropped = struct.unpack_from("<I", ring._cq, ring._cq_dropped)[0]
        struct.pack_into("<I", ring._cq, ring._cq_dropped, dropped + 1)
        unawaited = FLUSH_UNAWAITED.set(True)
        try:
            with trio.fail_after(5), pytest.raises(OSError) as raised:
                await ring.finish(token)
        finally:
            FLUSH_UNAWAITED.reset(unawaited)
        assert raised.value.errno == errno.EIO
    finally:
        ring.close()
