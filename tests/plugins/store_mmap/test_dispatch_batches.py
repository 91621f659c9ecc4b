"""The dispatch loop sizes its batches by record count: large records get larger batches."""

from __future__ import annotations

import pytest

from kernel.dispatch import BATCH_BYTES, BATCH_RECORDS, MAX_BATCH_BYTES, STEP_RECORDS, DispatchService

from .helpers import messages, opened, store_context


class RecordingStore:
    """The store, with the ``max_bytes`` of every log read noted."""

    def __init__(self, store: object) -> None:
        self.store = store
        self.asked: list[int] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def read_log(self, offset: int, *, end: int, max_bytes: int):  # type: ignore[no-untyped-def]
        self.asked.append(max_bytes)
        return await self.store.read_log(offset, end=end, max_bytes=max_bytes)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("size", "expected"),
    [(100, BATCH_BYTES), (1024, None), (64 * 1024, MAX_BATCH_BYTES)],
)
async def test_a_batch_holds_about_batch_records_records_within_its_byte_bounds(tmp_path, size, expected):
    async with opened(tmp_path, commit_log_file_size="64MiB") as (store, _):
        for queue_id in range(4):
            await store.append(messages("TopicA", queue_id, 900, size=size))
        recording = RecordingStore(store)
        service = DispatchService(store_context(tmp_path), recording, list(store.dispatchers()))  # type: ignore[arg-type]
        asked = recording.asked
        offset, end = service.start_offset(), store.positions.wrote.value
        for _ in range(3):
            offset = await service.dispatch_once(offset, end)
        assert asked[0] == BATCH_BYTES
        record_size = end // 3600
        wanted = expected if expected is not None else record_size * BATCH_RECORDS
        assert abs(asked[-1] - wanted) <= wanted // 50
        assert BATCH_BYTES <= asked[-1] <= MAX_BATCH_BYTES


@pytest.mark.parametrize(("count", "steps"), [(30, 4), (200, 1)])
async def test_a_light_round_of_few_records_goes_in_steps_a_busier_one_at_once(tmp_path, count, steps):
    """Sends one at a time leave a few dozen records per gathering interval: they are
    dispatched ``STEP_RECORDS`` at a time with a turn in between, so a request arriving meanwhile
    waits for one step; a round of more records goes as one batch (cheaper per record)."""
    async with opened(tmp_path) as (store, _):
        for i in range(count):
            await store.append(messages("TopicA", i % 2, 1, start=i, size=100))
        recording = RecordingStore(store)
        service = DispatchService(store_context(tmp_path), recording, list(store.dispatchers()))  # type: ignore[arg-type]
        service._record_bytes = store.positions.wrote.value // count  # as learnt from earlier batches
        end = store.positions.wrote.value
        assert await service._dispatch_round(service.start_offset(), end, light=True) == end
        assert len(recording.asked) == steps
        if steps > 1:
            assert max(recording.asked) < STEP_RECORDS * 2 * (end // count)
        assert all(d.dispatched_offset() == end for d in store.dispatchers())
