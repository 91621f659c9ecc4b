"""The views' dispatch of single sends runs while the commit log's sync runs in the kernel
(:mod:`kernel.sync_overlap`): what a sync-flush put appended is in its consume queue when the
put returns, encoded batches and large backlogs are left to the dispatch loop, and the loop and
the overlap never dispatch a record twice or skip one."""

from __future__ import annotations

import collections
import logging

import pytest
import trio
import trio.testing

from kernel import Broker, Message, MessageBatch
from kernel.dispatch import OVERLAP_RECORDS, DispatchService
from kernel.put_alone import PUT_ALONE
from kernel.sync_overlap import SyncOverlap
from kernel.testing import make_config
from plugins.store_mmap.ring_sync import RingUnavailable, open_ring
from trocket.client.batch import encode_batch
from wire import record
from wire.wire_batch import WireBatch

from .helpers import messages, opened, store_context


@pytest.fixture(autouse=True)
def io_uring_or_skip() -> None:
    try:
        open_ring().close()
    except RingUnavailable as error:  # the flush thread's syncs leave nothing to overlap
        pytest.skip(f"io_uring unavailable: {error.strerror}")


def sync_broker(data_dir) -> Broker:
    return Broker.assemble(
        make_config(
            broker={"plugins": ["store_mmap", "flush_sync"], "data_dir": str(data_dir), "flush": "sync"},
            store_mmap={"commit_log_file_size": "4MiB", "sync_with": "io_uring"},
        )
    )


def fast_disk(broker: Broker) -> None:
    """As the ring sees a healthy disk: it blocks for the next sync (and so runs the work
    meanwhile) whatever a loaded test machine's last syncs took."""
    broker.store.ring.waits.recent_seconds = 0.0  # type: ignore[attr-defined]


def wire_batch(topic: str, queue_id: int, count: int, tag: str) -> WireBatch:
    body = encode_batch((0, f"{tag}-{i}".encode(), {"UNIQ_KEY": f"{tag}{i:08d}"}) for i in range(count))
    return WireBatch.decode(
        body,
        topic=topic,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=0,
        born_host=("127.0.0.1", 40000),
        reconsume_times=0,
    )


class TaskSteps(trio.abc.Instrument):
    """Scheduler steps taken, by task name."""

    def __init__(self) -> None:
        self.steps: collections.Counter[str] = collections.Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] += 1


async def test_a_dispatch_loop_woken_for_records_the_sync_dispatched_idles_again_in_one_step(tmp_path):
    """A put alone (``PUT_ALONE``: its leader syncs without waiting for a pass) has its record
    dispatched during its own sync; the dispatch loop, woken by the append, runs only after
    that and idles again in the same step, instead of first taking a scheduler pass of its
    own (a second step after every sync put, which met the client's next request now and
    then: the one-in-flight p99, docs/performance.md, twenty-fourth step)."""
    broker = sync_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        counter = TaskSteps()
        trio.lowlevel.add_instrument(counter)
        puts = 40
        for n in range(puts):
            fast_disk(broker)
            await trio.testing.wait_all_tasks_blocked()
            token = PUT_ALONE.set(True)
            try:
                result = await broker.put(MessageBatch([Message("Alone", f"m{n}".encode(), queue_id=0)]))
            finally:
                PUT_ALONE.reset(token)
            assert result.ok, result.remark
            assert broker.store.max_queue_offset("Alone", 0) == n + 1
        await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.remove_instrument(counter)
        dispatch_steps = counter.steps["kernel.dispatch.DispatchService.run"]
        assert puts // 2 <= dispatch_steps <= puts + 4, counter.steps
        broker.request_stop()


async def test_a_sync_put_returns_with_its_message_already_in_the_consume_queue(tmp_path):
    broker = sync_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        store = broker.store
        for n in range(40):
            fast_disk(broker)
            # A client's round trip lies between two sends one at a time: the dispatch loop,
            # woken by the previous put, is idle again (back to back, it could start a round
            # in the pass the sync leader waits for, and hold the views while the sync runs).
            await trio.testing.wait_all_tasks_blocked()
            result = await broker.put(MessageBatch([Message("Overlap", f"m{n}".encode(), queue_id=0)]))
            assert result.ok, result.remark
            # Dispatched while its own sync ran: no turn of the dispatch loop was needed.
            assert store.max_queue_offset("Overlap", 0) == n + 1
        stats = broker.statistics().dispatch
        assert stats is not None and stats.overlapped >= 40
        assert stats.dispatched_offset == store.positions.wrote.value
        entries = store.lookup("Overlap", 0, 0, 40)
        bodies = [record.decode_record(r).body for r in await store.read_records(entries)]
        assert bodies == [f"m{n}".encode() for n in range(40)]
        broker.request_stop()


async def test_encoded_batches_are_left_to_the_dispatch_loop(tmp_path):
    broker = sync_broker(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        fast_disk(broker)
        result = await broker.put(MessageBatch(wire_batch("Batched", 0, 32, "b"), "group"))
        assert result.ok, result.remark
        stats = broker.statistics().dispatch
        assert stats is not None and stats.overlapped == 0
        await broker.wait_dispatched()
        assert broker.store.max_queue_offset("Batched", 0) == 32
        broker.request_stop()


async def test_the_loop_and_the_overlap_together_dispatch_every_record_once_in_order(tmp_path):
    """Single sends from many tasks (groups, lone puts), batches among them, under sync flush:
    every queue ends up with each of its messages once, in queue-offset order."""
    broker = sync_broker(tmp_path)
    sent: dict[int, list[bytes]] = {queue_id: [] for queue_id in range(4)}

    async def singles(queue_id: int, start: int) -> None:
        for n in range(start, start + 30):
            body = f"s{queue_id}-{n}".encode()
            fast_disk(broker)
            assert (await broker.put(MessageBatch([Message("Mixed", body, queue_id=queue_id)]))).ok
            sent[queue_id].append(body)

    async def batches() -> None:
        for n in range(5):
            wire = wire_batch("Mixed", 3, 32, f"w{n}")
            assert (await broker.put(MessageBatch(wire, "group"))).ok
            sent[3].extend(f"w{n}-{i}".encode() for i in range(32))

    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        async with trio.open_nursery() as producers:
            for queue_id in range(3):
                producers.start_soon(singles, queue_id, 0)
        stats = broker.statistics().dispatch
        assert stats is not None and stats.overlapped > 0
        # A batch ahead of single sends holds the overlap back until the loop took it.
        async with trio.open_nursery() as producers:
            for queue_id in range(3):
                producers.start_soon(singles, queue_id, 30)
            producers.start_soon(batches)
        await broker.wait_dispatched()
        store = broker.store
        for queue_id, bodies in sent.items():
            entries = store.lookup("Mixed", queue_id, 0, 1000)
            assert len(entries) == len(bodies)
            stored = [record.decode_record(r) for r in await store.read_records(entries)]
            assert [m.queue_offset for m in stored] == list(range(len(bodies)))
            assert sorted(m.body for m in stored) == sorted(bodies)
        broker.request_stop()


async def test_the_overlap_skips_what_the_loop_holds_a_rewind_and_a_large_backlog(tmp_path):
    async with opened(tmp_path, commit_log_file_size="4MiB") as (store, _):
        service = DispatchService(store_context(tmp_path), store, list(store.dispatchers()))
        service.dispatched.reset(store.positions.wrote.value)
        await store.append(messages("Skip", 0, 1))
        async with service._lock:  # the loop is in a batch
            service.dispatch_while_syncing()
        assert service.statistics().overlapped == 0
        service.dispatch_while_syncing()
        assert service.statistics().overlapped == 1
        assert store.max_queue_offset("Skip", 0) == 1

        await store.append(messages("Skip", 0, OVERLAP_RECORDS + 1, start=1))  # one append, too large
        service.dispatch_while_syncing()
        assert service.statistics().overlapped == 1
        assert store.max_queue_offset("Skip", 0) == 1
        offset = await service.dispatch_once(service.dispatched.value, store.positions.wrote.value)
        assert offset == store.positions.wrote.value
        assert store.max_queue_offset("Skip", 0) == OVERLAP_RECORDS + 2


def test_failing_work_is_counted_and_logged_and_the_rest_still_runs(caplog):
    overlap = SyncOverlap()
    ran: list[str] = []

    def broken() -> None:
        raise OSError(28, "No space left on device")

    assert not overlap.wanted
    overlap.add(broken)
    overlap.add(lambda: ran.append("second"))
    assert overlap.wanted
    with caplog.at_level(logging.ERROR, logger="kernel.sync_overlap"):
        overlap.run()
    assert ran == ["second"]
    assert overlap.runs == 1 and overlap.failures == 1
    assert "left to its owner" in caplog.text
    overlap.remove(broken)
    overlap.run()
    assert overlap.failures == 1 and ran == ["second", "second"]


class FailingView:
    """A view that cannot write (disk full) while ``failing``."""

    def __init__(self, view: object) -> None:
        self.view = view
        self.failing = True

    def __getattr__(self, name: str) -> object:
        return getattr(self.view, name)

    def dispatch(self, records, end_offset: int) -> None:  # type: ignore[no-untyped-def]
        if self.failing:
            raise OSError(28, "No space left on device")
        self.view.dispatch(records, end_offset)  # type: ignore[attr-defined]


async def test_a_view_that_cannot_write_pauses_the_overlap_until_the_loop_dispatches_again(tmp_path):
    async with opened(tmp_path, commit_log_file_size="4MiB") as (store, _):
        queues = FailingView(store.queues)
        service = DispatchService(store_context(tmp_path), store, [queues])  # type: ignore[list-item]
        service.dispatched.reset(store.positions.wrote.value)
        await store.append(messages("Full", 0, 1))
        service.dispatch_while_syncing()  # no exception into the caller's flush
        assert service.statistics().overlapped == 0
        await store.append(messages("Full", 0, 1, start=1))
        service.dispatch_while_syncing()  # paused: not even tried
        assert service.statistics().overlapped == 0
        queues.failing = False
        offset = await service.dispatch_once(service.dispatched.value, store.positions.wrote.value)
        assert offset == store.positions.wrote.value  # the loop's retry reads the records back
        assert store.max_queue_offset("Full", 0) == 2
        await store.append(messages("Full", 0, 1, start=2))
        service.dispatch_while_syncing()
        assert service.statistics().overlapped == 1
        assert store.max_queue_offset("Full", 0) == 3
