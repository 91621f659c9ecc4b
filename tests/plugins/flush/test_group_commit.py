"""Group commit asks for a flush only when a put is not covered yet."""

from __future__ import annotations

import attrs
import trio
import trio.testing

from kernel.model import AppendResult, Durability
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
        nursery.cancel_scope.cancel()
