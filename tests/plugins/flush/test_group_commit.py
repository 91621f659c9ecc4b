"""Group commit asks for a flush only when a put is not covered yet."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import attrs
import pytest
import trio
import trio.testing

from kernel.model import AppendResult, Durability
from kernel.put_alone import PUT_ALONE
from kernel.sync import LogPositions
from plugins.flush_sync.policy import GroupCommitFlush


@attrs.define
class CountingStore:
    """Flushes advance ``flushed`` to ``wrote`` and are counted."""

    positions: LogPositions = attrs.field(factory=LogPositions)
    flushes: int = 0

    async def flush(self, **_: object) -> int:
        await trio.lowlevel.checkpoint()
        self.flushes += 1
        self.positions.flushed.advance(self.positions.wrote.value)
        return self.positions.flushed.value


def appended(end: int) -> AppendResult:
    return AppendResult([end - 10], [10], [0], 0, end)


def recording_put(
    store: CountingStore, policy: GroupCommitFlush, results: dict[int, Durability]
) -> Callable[[int], Awaitable[None]]:
    """A put as the pipeline makes it (append: ``wrote`` moves; then the wait), its outcome
    recorded in ``results`` by its end offset."""

    async def put(end: int) -> None:
        store.positions.wrote.advance(end)
        results[end] = await policy.wait_durable(appended(end), wait=True)

    return put


async def test_puts_of_a_group_already_flushed_ask_for_no_other_flush():
    store = CountingStore()
    policy = GroupCommitFlush(store, timeout=5.0)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        store.positions.wrote.advance(30)
        # Three puts appended together: the first wait flushes all three.
        results = [await policy.wait_durable(appended(end), wait=True) for end in (10, 20, 30)]
        assert results == [Durability.FLUSHED] * 3
        await trio.testing.wait_all_tasks_blocked()
        assert store.flushes == 1
        store.positions.wrote.advance(40)
        assert await policy.wait_durable(appended(40), wait=True) is Durability.FLUSHED
        assert store.flushes == 2
        assert policy.statistics().started_early == 0  # a store that cannot start one is only flushed
        nursery.cancel_scope.cancel()


@attrs.define
class GatedStore(CountingStore):
    """Flushes one at a time (as the stores serialise them), each waiting for ``gate`` (a disk
    that is slow while the test wants it); remembers which task ran them."""

    gate: trio.Event = attrs.field(factory=trio.Event)
    flushed_by: list[object] = attrs.field(factory=list)
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    asked_at: list[int] = attrs.field(factory=list)
    """What was appended when each flush was asked for (before it waits for the lock)."""

    async def flush(self, **_: object) -> int:
        self.asked_at.append(self.positions.wrote.value)
        async with self.lock:
            self.flushed_by.append(trio.lowlevel.current_task())
            covered = self.positions.wrote.value  # what is on the disk when the flush starts
            await self.gate.wait()
            self.flushes += 1
            self.positions.flushed.advance(covered)
            return self.positions.flushed.value


def open_gate(
    store: GatedStore,
) -> tuple[GroupCommitFlush, dict[int, Durability], Callable[[int], Awaitable[None]]]:
    """A policy over ``store`` with its gate open (each flush completes at once), the puts'
    outcomes by end offset, and a put that records into them."""
    store.gate.set()
    policy = GroupCommitFlush(store, timeout=5.0)  # type: ignore[arg-type]
    results: dict[int, Durability] = {}
    return policy, results, recording_put(store, policy, results)


async def test_a_lone_put_flushes_on_its_own_task():
    """No hand-over to the flush loop's task when no flush is under way: the put's own task
    flushes (a lone sync put saved the scheduler passes of waking the loop and being woken)."""
    store = GatedStore()
    store.gate.set()
    policy = GroupCommitFlush(store, timeout=5.0)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        store.positions.wrote.advance(10)
        assert await policy.wait_durable(appended(10), wait=True) is Durability.FLUSHED
        assert store.flushed_by == [trio.lowlevel.current_task()]
        statistics = policy.statistics()
        assert (statistics.led, statistics.flushes, statistics.released) == (1, 1, 1)
        nursery.cancel_scope.cancel()


async def test_puts_arriving_during_a_leaders_flush_share_the_next_flush():
    store = GatedStore()
    policy = GroupCommitFlush(store, timeout=5.0)  # type: ignore[arg-type]
    results: dict[int, Durability] = {}
    put = recording_put(store, policy, results)

    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        nursery.start_soon(put, 10)
        await trio.testing.wait_all_tasks_blocked()  # the leader is inside its flush
        nursery.start_soon(put, 20)
        nursery.start_soon(put, 30)
        await trio.testing.wait_all_tasks_blocked()
        assert len(store.flushed_by) == 1 and not results, "nobody else flushes while the leader does"
        store.gate.set()
        with trio.fail_after(10):  # a put left waiting fails the test instead of spinning here
            while len(results) < 3:
                await trio.testing.wait_all_tasks_blocked()
                await trio.sleep(0.001)
        assert results == {10: Durability.FLUSHED, 20: Durability.FLUSHED, 30: Durability.FLUSHED}
        assert store.flushes == 2, "one flush for the leader, one for the two that came during it"
        assert policy.statistics().led == 1
        nursery.cancel_scope.cancel()


async def test_a_leader_on_a_stalled_disk_is_answered_at_its_deadline(autojump_clock):
    """The leader's own flush does not stretch its wait past the timeout: FLUSH_DISK_TIMEOUT
    then (RocketMQ's syncFlushTimeout), and the store is flushed again for the next put."""
    store = GatedStore()
    policy = GroupCommitFlush(store, timeout=5.0)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        store.positions.wrote.advance(10)
        started = trio.current_time()
        with trio.fail_after(60):  # a leader that ignored its deadline would wait for the gate
            assert await policy.wait_durable(appended(10), wait=True) is Durability.TIMEOUT
        assert trio.current_time() - started == pytest.approx(5.0)  # virtual time: the deadline, not later
        assert policy.statistics().timeouts == 1
        store.gate.set()
        store.positions.wrote.advance(20)
        assert await policy.wait_durable(appended(20), wait=True) is Durability.FLUSHED
        nursery.cancel_scope.cancel()


async def test_puts_appended_in_the_leaders_scheduler_pass_share_its_flush():
    """A leader syncs after the scheduler pass it was elected in: the puts read in that pass
    (a pipelining connection's requests, other connections' single sends) are appended by
    then and covered by its one flush, instead of each leading a flush of its own."""
    store = GatedStore()
    policy, results, put = open_gate(store)

    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        async with trio.open_nursery() as puts:
            for end in range(10, 170, 10):  # 16 puts, all started in one scheduler pass
                puts.start_soon(put, end)
        assert results == {end: Durability.FLUSHED for end in range(10, 170, 10)}
        await trio.testing.wait_all_tasks_blocked()
        assert store.flushes == 1, "one flush covered the 16 puts"
        statistics = policy.statistics()
        assert (statistics.led, statistics.released) == (1, 16)
        nursery.cancel_scope.cancel()


async def test_a_put_marked_alone_flushes_without_waiting_for_its_pass():
    """``PUT_ALONE``: the front end knows nothing can join this put, so its leader syncs at
    once instead of after the pass (a put started in the same pass is then not covered by
    that flush and is flushed after it); a put without the mark keeps the pass (above)."""
    store = GatedStore()
    policy, results, put = open_gate(store)

    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        async with trio.open_nursery() as puts:
            store.positions.wrote.advance(10)
            puts.start_soon(put, 20)  # runs in the next scheduler pass
            token = PUT_ALONE.set(True)
            try:
                results[10] = await policy.wait_durable(appended(10), wait=True)
            finally:
                PUT_ALONE.reset(token)
        assert results == {10: Durability.FLUSHED, 20: Durability.FLUSHED}
        assert store.asked_at[0] == 10, "the alone put's flush started before the other put appended"
        statistics = policy.statistics()
        assert statistics.led_alone == 1 and statistics.led >= 1
        nursery.cancel_scope.cancel()


async def test_puts_that_counted_on_a_cancelled_leader_are_flushed_by_the_loop():
    """A leader cancelled before its flush (its request's connection closed) leaves no put of
    its scheduler pass waiting for a flush nobody runs: the loop flushes them."""
    store = GatedStore()
    store.gate.set()
    policy = GroupCommitFlush(store, timeout=5.0)  # type: ignore[arg-type]
    results: dict[int, Durability] = {}

    async def put(end: int, scope: trio.CancelScope | None = None) -> None:
        store.positions.wrote.advance(end)
        if scope is not None:
            with scope:
                await policy.wait_durable(appended(end), wait=True)
            return
        results[end] = await policy.wait_durable(appended(end), wait=True)

    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        leader = trio.CancelScope()
        async with trio.open_nursery() as puts:
            puts.start_soon(put, 10, leader)
            puts.start_soon(put, 20)
            puts.start_soon(put, 30)
            leader.cancel()  # before the leader's turn comes again
        assert results == {20: Durability.FLUSHED, 30: Durability.FLUSHED}
        assert store.positions.flushed.value == 30
        nursery.cancel_scope.cancel()


@attrs.define
class EarlyStartingStore(CountingStore):
    """A store that can start its flush early (``EarlyFlushStore``); records the calls."""

    calls: list[tuple[str, int]] = attrs.field(factory=list)
    deadlines: list[float] = attrs.field(factory=list)
    starts: bool = True

    def start_flush(self) -> bool:
        self.calls.append(("start", self.positions.wrote.value))
        return self.starts

    async def flush(self, **_: object) -> int:
        self.calls.append(("flush", self.positions.wrote.value))
        self.deadlines.append(trio.current_effective_deadline())
        return await super().flush()


@pytest.mark.parametrize("starts", [True, False], ids=["started", "refused"])
async def test_a_leader_starts_its_stores_flush_before_flushing(starts):
    """The leader asks the store to start its flush right before its flush call, after its
    scheduler pass (a put appended in that pass is covered by the start); the count says how
    many the store took."""
    store = EarlyStartingStore(starts=starts)
    policy = GroupCommitFlush(store, timeout=5.0)  # type: ignore[arg-type]
    results: dict[int, Durability] = {}
    put = recording_put(store, policy, results)
    async with trio.open_nursery() as nursery:
        await nursery.start(policy.run)
        async with trio.open_nursery() as puts:
            puts.start_soon(put, 10)
            puts.start_soon(put, 20)
        assert results == {10: Durability.FLUSHED, 20: Durability.FLUSHED}
        assert store.calls == [("start", 20), ("flush", 20)]
        assert policy.statistics().started_early == (1 if starts else 0)
        # A started flush waits for the disk alone: no deadline scope around it; a flush the
        # store did not start keeps the put's deadline (it may wait for the store's locks).
        assert (store.deadlines[0] == math.inf) == starts
        nursery.cancel_scope.cancel()
