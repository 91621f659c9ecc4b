"""The idle schedulers' wake-ups: an event per waited-on queue, set by the dispatched records
that touch it and by nothing else."""

from __future__ import annotations

import trio

from kernel.model import SCHEDULE_TOPIC, TIMER_TOPIC, DispatchRecord
from plugins.retry_dlq.arrivals import ParkedArrivals, wait_for_arrival
from wire.dispatch_batch import as_batch


def _record(topic: str, queue_id: int) -> DispatchRecord:
    return DispatchRecord(
        topic=topic, queue_id=queue_id, queue_offset=0, physical_offset=0, size=100, tags_code=0,
        store_timestamp=0, sys_flag=0, keys="", unique_key=None, properties={},
    )  # fmt: skip


def test_only_the_queues_a_batch_touches_are_woken():
    levels, timer_arrivals = ParkedArrivals(SCHEDULE_TOPIC), ParkedArrivals(TIMER_TOPIC)
    level_two = levels.event(1)
    level_three = levels.event(2)
    timer = timer_arrivals.event(0)
    assert levels.event(1) is level_two, "one event per queue until it is set"

    def notify(records) -> None:  # as the plugin's dispatch hook does
        levels.notify(records)
        timer_arrivals.notify(records)

    notify(as_batch([_record("Orders", 1), _record(SCHEDULE_TOPIC, 0)]))
    assert not (level_two.is_set() or level_three.is_set() or timer.is_set())
    notify(as_batch([_record("Orders", 1), _record(SCHEDULE_TOPIC, 2)]))
    assert level_three.is_set() and not level_two.is_set() and not timer.is_set()
    notify([_record(TIMER_TOPIC, 0)])  # a plain sequence of records too
    assert timer.is_set() and not level_two.is_set()
    notify([_record("Orders", 1)])  # another topic's queue 1 is not level two's
    assert not level_two.is_set()
    assert levels.event(2) is not level_three, "a set event is replaced"


async def test_a_wait_ends_at_the_arrival_or_the_timeout():
    arrivals = ParkedArrivals(SCHEDULE_TOPIC)
    started = trio.current_time()
    await wait_for_arrival(arrivals.event(0), 0.05)
    assert trio.current_time() - started >= 0.05
    event = arrivals.event(0)
    with trio.fail_after(60):  # the hour-long wait ends with the arrival, or the test fails
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_arrival, event, 3600)
            await trio.sleep(0.01)
            arrivals.notify([_record(SCHEDULE_TOPIC, 0)])
    assert trio.current_time() - started < 60
