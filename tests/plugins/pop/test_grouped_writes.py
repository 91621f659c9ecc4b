"""Records written while a put runs share the next put; every caller gets its put's result and
where its records start; a failed put is every caller's error."""

from __future__ import annotations

import pytest
import trio

from kernel.model import AppendResult, Message, PutResult, PutStatus
from plugins.pop.grouped_writes import GroupedWrites


def message(n: int) -> Message:
    return Message("rmq_sys_REVIVE_LOG_Test", b"%d" % n)


async def test_writes_arriving_during_a_put_share_the_next_one():
    puts: list[list[bytes]] = []
    release = trio.Event()

    async def put(messages: list[Message]) -> PutResult:
        puts.append([m.body for m in messages])
        if len(puts) == 1:
            await release.wait()
        offsets = list(range(len(messages)))
        return PutResult(PutStatus.PUT_OK, AppendResult(offsets, [1] * len(messages), offsets, 0, 0))

    writes = GroupedWrites(put)
    answers: dict[int, tuple[PutResult, int]] = {}

    async def write(n: int, count: int) -> None:
        answers[n] = await writes.write([message(n)] * count)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, 0, 1)
        await trio.sleep(0.01)  # the first put runs and waits
        nursery.start_soon(write, 1, 2)
        nursery.start_soon(write, 2, 3)
        await trio.sleep(0.01)
        release.set()
    assert len(puts) == 2 and puts[0] == [b"0"] and sorted(puts[1]) == [b"1", b"1", b"2", b"2", b"2"]
    for n, count in ((1, 2), (2, 3)):  # each caller learns where its records start in the put
        start = answers[n][1]
        assert puts[1][start : start + count] == [b"%d" % n] * count
    assert writes.puts == 2 and writes.records == 6


async def test_writes_started_together_share_a_put_that_never_yields():
    """An asynchronous flush's put returns without a checkpoint: the writes of one scheduler
    pass (acks of one burst of requests) still go out together."""
    puts: list[list[bytes]] = []

    async def put(messages: list[Message]) -> PutResult:
        puts.append([m.body for m in messages])
        offsets = list(range(len(messages)))
        return PutResult(PutStatus.PUT_OK, AppendResult(offsets, [1] * len(messages), offsets, 0, 0))

    writes = GroupedWrites(put)
    async with trio.open_nursery() as nursery:
        for n in range(5):
            nursery.start_soon(writes.write, [message(n)])
    assert len(puts) == 1 and sorted(puts[0]) == [b"0", b"1", b"2", b"3", b"4"]


async def test_a_failed_put_is_every_callers_error():
    async def put(messages: list[Message]) -> PutResult:
        await trio.sleep(0.01)
        raise OSError(28, "No space left on device")

    writes = GroupedWrites(put)
    errors: list[BaseException] = []

    async def write(n: int) -> None:
        with pytest.raises(OSError) as raised:
            await writes.write([message(n)])
        errors.append(raised.value)

    async with trio.open_nursery() as nursery:
        for n in range(3):
            nursery.start_soon(write, n)
    assert len(errors) == 3
