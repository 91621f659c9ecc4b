"""The dispatch loop sizes its batches by record count: large records get larger batches."""

from __future__ import annotations

import pytest
import trio

from kernel.dispatch import BATCH_BYTES, BATCH_RECORDS, MAX_BATCH_BYTES, DispatchService

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


@pytest.mark.parametrize("count", [30, 200])
async def test_a_round_is_one_read_and_a_light_one_gives_the_network_a_turn_before_each_view(tmp_path, count):
    """Sends one at a time leave a few dozen records per gathering interval: the round reads
    them once and passes through the scheduler before each view (trio runs other tasks and
    polls the network there), so a request arriving meanwhile waits for one view's part, not
    the round. A busier round is one batch too."""
    async with opened(tmp_path) as (store, _):
        for i in range(count):
            await store.append(messages("TopicA", i % 2, 1, start=i, size=100))
        steps = TaskSteps()
        recording = RecordingStore(store)
        views = [NotedView(view, steps) for view in store.dispatchers()]
        service = DispatchService(store_context(tmp_path), recording, views)  # type: ignore[arg-type]
        service._record_bytes = store.positions.wrote.value // count  # as learnt from earlier batches
        end = store.positions.wrote.value
        trio.lowlevel.add_instrument(steps)
        try:
            read_in = steps.count
            assert await service._dispatch_round(service.start_offset(), end, light=True) == end
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert len(recording.asked) == 1
        assert len(steps.noted) == len(views) >= 2
        # Each view in a scheduler step of its own, after the read's.
        assert sorted(set(steps.noted)) == steps.noted and steps.noted[0] > read_in
        assert all(d.dispatched_offset() == end for d in store.dispatchers())


class TaskSteps(trio.abc.Instrument):
    """Counts task steps (a task resumed by the scheduler); ``noted``: the count at each view's
    batch."""

    def __init__(self) -> None:
        self.count = 0
        self.noted: list[int] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


class NotedView:
    """A view that notes the scheduler step each batch it is given comes in."""

    def __init__(self, view: object, steps: TaskSteps) -> None:
        self.view = view
        self.steps = steps

    def dispatched_offset(self) -> int:
        return self.view.dispatched_offset()  # type: ignore[attr-defined]

    def dispatch(self, records: object, end_offset: int) -> None:
        self.steps.noted.append(self.steps.count)
        self.view.dispatch(records, end_offset)  # type: ignore[attr-defined]
