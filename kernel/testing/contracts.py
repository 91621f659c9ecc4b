"""Behavioural conformance suite for :class:`~kernel.protocols.MessageStore` providers.

Like ``trio.testing.check_one_way_stream``: a store plugin calls
``await check_message_store(open_store)`` from its own tests, where ``open_store()`` returns an
async context manager yielding a fresh, recovered, empty store. Every check is behavioural
(append, read back byte for byte, queue offsets, statuses), not a type check.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from kernel import pull
from kernel.model import GetStatus, Message, tags_code
from kernel.protocols import BufferedStore, MessageStore
from kernel.testing.helpers import dispatch_all
from wire import record

StoreOpener = Callable[[], AbstractAsyncContextManager[Any]]


def _msg(topic: str, queue_id: int, i: int, tags: str = "TagA") -> Message:
    return Message(
        topic=topic,
        body=f"body-{i}".encode() * (1 + i % 3),
        queue_id=queue_id,
        properties={"TAGS": tags, "KEYS": f"k{i} shared", "UNIQ_KEY": f"U{i:030d}"},
        born_timestamp=1_700_000_000_000 + i,
        born_host=("10.0.0.7", 40000 + i),
    )


async def check_append_and_read_back(store: MessageStore) -> None:
    messages = [_msg("T", 0, i) for i in range(5)]
    result = await store.append(messages)
    assert result.queue_offsets == [0, 1, 2, 3, 4], result.queue_offsets
    assert result.physical_offsets == record.iter_sizes(result.sizes, result.first_offset)
    assert result.end_offset == result.physical_offsets[-1] + result.sizes[-1]
    assert store.watermarks().wrote >= result.end_offset
    await dispatch_all(store)
    assert store.max_queue_offset("T", 0) == 5
    entries = store.lookup("T", 0, 0, 10)
    assert [e.queue_offset for e in entries] == [0, 1, 2, 3, 4]
    raw = await store.read_records(entries)
    for i, data in enumerate(raw):
        decoded = record.decode_record(data)
        assert decoded.body == messages[i].body
        assert decoded.topic == "T" and decoded.queue_id == 0 and decoded.queue_offset == i
        assert decoded.physical_offset == result.physical_offsets[i]
        assert decoded.born_host == ("10.0.0.7", 40000 + i)
        assert decoded.properties["KEYS"] == f"k{i} shared"
        assert decoded.size == len(data) == result.sizes[i]


async def check_queue_offsets_are_per_queue(store: MessageStore) -> None:
    await store.append([_msg("A", 0, 0), _msg("A", 1, 1), _msg("B", 0, 2)])
    second = await store.append([_msg("A", 0, 3), _msg("A", 0, 4)])
    assert second.queue_offsets == [1, 2]
    await dispatch_all(store)
    assert store.max_queue_offset("A", 0) == 3
    assert store.max_queue_offset("A", 1) == 1
    assert store.max_queue_offset("B", 0) == 1
    assert store.max_queue_offset("missing", 0) == 0


async def check_pull_statuses(store: MessageStore) -> None:
    empty = await pull.get_messages(store, "P", 0, 0)
    assert empty.status is GetStatus.NO_MESSAGE_IN_QUEUE
    await store.append([_msg("P", 0, i, tags="TagA" if i % 2 else "TagB") for i in range(6)])
    await dispatch_all(store)
    found = await pull.get_messages(store, "P", 0, 0, max_count=4)
    assert found.status is GetStatus.FOUND and len(found.records) == 4
    assert found.next_begin_offset == 4 and found.max_offset == 6
    filtered = await pull.get_messages(store, "P", 0, 0, tags_codes={tags_code("TagA")})
    assert [record.decode_record(r).queue_offset for r in filtered.records] == [1, 3, 5]
    none = await pull.get_messages(store, "P", 0, 0, tags_codes={tags_code("Nope")})
    assert none.status is GetStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 6
    one = await pull.get_messages(store, "P", 0, 6)
    assert one.status is GetStatus.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 6
    badly = await pull.get_messages(store, "P", 0, 99)
    assert badly.status is GetStatus.OFFSET_OVERFLOW_BADLY
    limited = await pull.get_messages(store, "P", 0, 0, max_bytes=1)
    assert len(limited.records) == 1, "max_bytes never returns nothing when one message is there"


async def check_read_log(store: MessageStore) -> None:
    result = await store.append([_msg("L", 2, i) for i in range(3)])
    if isinstance(store, BufferedStore) and store.stages_writes:
        await store.commit()
    records, next_offset = await store.read_log(
        result.first_offset, end=store.positions.wrote.value, max_bytes=1 << 20
    )
    assert [r.queue_offset for r in records] == [0, 1, 2]
    assert next_offset == result.end_offset
    assert records[0].keys == "k0 shared" and records[0].unique_key == f"U{0:030d}"
    assert records[1].tags_code == tags_code("TagA")


async def check_flush_advances_flushed(store: MessageStore) -> None:
    result = await store.append([_msg("F", 0, 0)])
    flushed = await store.flush()
    assert flushed >= result.end_offset
    assert store.positions.flushed.value == flushed
    marks = store.watermarks()
    assert marks.flushed <= marks.committed <= marks.wrote


async def check_staged_writes_are_invisible_until_committed(store: MessageStore) -> None:
    """Only for a :class:`BufferedStore` with staging on: readers see nothing staged, a commit
    publishes it, a flush commits first."""
    if not (isinstance(store, BufferedStore) and store.stages_writes):
        return
    visible = store.positions.wrote.value
    result = await store.append([_msg("S", 0, i) for i in range(3)])
    assert store.positions.wrote.value == visible, "staged bytes must not be visible"
    assert store.uncommitted_bytes() == result.end_offset - visible
    assert await store.commit(least_pages=1 << 20) == visible, "below least_pages: no commit"
    assert await store.commit() == result.end_offset
    assert store.uncommitted_bytes() == 0
    second = await store.append([_msg("S", 0, 3)])
    assert await store.flush() >= second.end_offset
    assert store.positions.wrote.value == second.end_offset


CHECKS = (
    check_staged_writes_are_invisible_until_committed,
    check_append_and_read_back,
    check_queue_offsets_are_per_queue,
    check_pull_statuses,
    check_read_log,
    check_flush_advances_flushed,
)


async def check_message_store(open_store: StoreOpener) -> None:
    """Run every check, each against a fresh store from ``open_store()``."""
    for check in CHECKS:
        async with open_store() as store:
            await check(store)
