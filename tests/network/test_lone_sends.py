"""Single sends are put at once while one connection sends, and gathered into one group while
several connections send in the same scheduler pass (``plugins.remoting.lone_sends``)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import trio

from kernel.model import Message, MessageBatch, PutResult, PutStatus
from kernel.put_alone import PUT_ALONE
from plugins.remoting.lone_sends import WINDOW, LoneSends


@attrs.define
class RecordingRuntime:
    """``put`` and ``put_group`` as the broker's runtime offers them, remembering the calls."""

    direct: list[MessageBatch] = attrs.field(factory=list)
    groups: list[list[MessageBatch]] = attrs.field(factory=list)

    async def put(self, batch: MessageBatch) -> PutResult:
        self.direct.append(batch)
        return PutResult(PutStatus.PUT_OK, None, f"direct {len(self.direct)}")

    async def put_group(self, batches: Sequence[MessageBatch]) -> list[PutResult]:
        self.groups.append(list(batches))
        return [PutResult(PutStatus.PUT_OK, None, f"grouped {i}") for i in range(len(batches))]


def batch(body: str) -> MessageBatch:
    return MessageBatch([Message("T", body.encode())], "PG")


def lone_sends(runtime: RecordingRuntime) -> LoneSends:
    return LoneSends(runtime.put_group, runtime.put)


async def test_a_single_connections_sends_are_put_at_once():
    runtime = RecordingRuntime()
    sends = lone_sends(runtime)
    connection = object()
    for i in range(5):
        result = await sends.put_from(connection, batch(f"m{i}"))
        assert result.remark == f"direct {i + 1}"
    assert len(runtime.direct) == 5 and not runtime.groups and sends.gathered == 0


async def test_sends_of_several_connections_in_one_pass_share_one_put(autojump_clock):
    runtime = RecordingRuntime()
    sends = lone_sends(runtime)
    first, others = object(), [object() for _ in range(8)]
    await sends.put_from(first, batch("alone"))  # nothing else sent lately: at once
    results: dict[int, PutResult] = {}

    async def send(index: int) -> None:
        results[index] = await sends.put_from(others[index], batch(f"c{index}"))

    async with trio.open_nursery() as nursery:  # eight connections' sends in one pass
        for index in range(8):
            nursery.start_soon(send, index)
    assert [len(group) for group in runtime.groups] == [8], "one put for the eight sends"
    assert sorted(result.remark for result in results.values()) == sorted(f"grouped {i}" for i in range(8))
    assert len(runtime.direct) == 1 and sends.gathered == 8

    await trio.sleep(WINDOW * 2)  # the other connections went quiet: one connection, at once
    await sends.put_from(first, batch("later"))
    await sends.put_from(first, batch("later again"))
    assert len(runtime.direct) == 3 and len(runtime.groups) == 1


async def test_a_put_is_marked_alone_only_when_its_sender_is_idle_and_no_other_connection_sends(
    autojump_clock,
):
    """``PUT_ALONE`` (the sync flush's leader then skips its gathering pass) is set around a put
    made at once for a connection with nothing else in flight, never around a gathered put
    nor a pipelining connection's, and is back to False after the put."""
    seen: list[bool] = []

    async def put(batch: MessageBatch) -> PutResult:
        seen.append(PUT_ALONE.get())
        return PutResult(PutStatus.PUT_OK, None, "")

    async def put_group(batches: Sequence[MessageBatch]) -> list[PutResult]:
        seen.extend(PUT_ALONE.get() for _ in batches)
        return [PutResult(PutStatus.PUT_OK, None, "") for _ in batches]

    sends = LoneSends(put_group, put)
    connection = object()
    await sends.put_from(connection, batch("idle sender"), sender_idle=True)
    await sends.put_from(connection, batch("pipelining"), sender_idle=False)
    assert seen == [True, False] and PUT_ALONE.get() is False

    async def other(index: int) -> None:
        await sends.put_from(object(), batch(f"c{index}"), sender_idle=True)

    seen.clear()
    async with trio.open_nursery() as nursery:  # several connections at once: gathered
        for index in range(3):
            nursery.start_soon(other, index)
    assert seen == [False, False, False]
