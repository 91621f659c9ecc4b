import pytest
import trio
import trio.testing

from kernel.errors import WatermarkFailed
from kernel.sync import Watermark


async def test_one_advance_releases_every_covered_waiter():
    mark = Watermark()
    released: list[int] = []

    async def waiter(target: int) -> None:
        await mark.wait_reached(target)
        released.append(target)

    async with trio.open_nursery() as nursery:
        for target in (10, 20, 30, 40):
            nursery.start_soon(waiter, target)
        await trio.testing.wait_all_tasks_blocked()
        mark.advance(30)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(released) == [10, 20, 30]
        assert mark.statistics().waiters == 1
        mark.advance(100)
    assert sorted(released) == [10, 20, 30, 40]


async def test_never_moves_backwards_and_returns_at_once_when_reached():
    mark = Watermark(value=50)
    mark.advance(10)
    assert mark.value == 50
    assert await mark.wait_reached(40) == 50


async def test_timeout_returns_false_and_forgets_the_waiter(autojump_clock):
    mark = Watermark()
    assert await mark.wait_reached_or_timeout(5, 1.0) is False
    assert mark.statistics().waiters == 0


async def test_failure_wakes_waiters_with_an_error():
    mark = Watermark()

    async def waiter() -> None:
        with pytest.raises(WatermarkFailed, match="disk on fire"):
            await mark.wait_reached(10)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        mark.fail(OSError("disk on fire"))
    with pytest.raises(WatermarkFailed):
        await mark.wait_reached(1)
    mark.clear_failure()
    mark.advance(1)
    assert await mark.wait_reached(1) == 1


async def test_deadline_waits_expire_in_deadline_order_and_release_on_advance(autojump_clock):
    """wait_reached_by (group commit's hot path): one reaper task expires overdue waiters, in
    deadline order even when a later caller has an earlier deadline; advance releases the rest."""
    mark = Watermark()
    outcomes: dict[str, tuple[bool, float]] = {}

    async def waiter(name: str, target: int, timeout: float) -> None:
        reached = await mark.wait_reached_by(target, trio.current_time() + timeout)
        outcomes[name] = (reached, trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(mark.expire_overdue_waiters)
        start = trio.current_time()
        nursery.start_soon(waiter, "late", 10, 5.0)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter, "early", 10, 2.0)
        nursery.start_soon(waiter, "released", 3, 4.0)
        await trio.sleep(1.0)
        mark.advance(5)
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert outcomes["released"] == (True, start + 1.0)
    assert outcomes["early"] == (False, start + 2.0)
    assert outcomes["late"] == (False, start + 5.0)
    assert mark.statistics().waiters == 0


async def test_a_deadline_wait_already_reached_returns_without_a_scheduler_pass():
    """The puts of a group that one flush covered are released by one task, one wait after
    another: only the first may park; the rest must not cost a scheduler pass each (they
    did, and it cost sync flush with 64 sends in flight a fifth of its rate)."""
    mark = Watermark()
    mark.advance(10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(mark.expire_overdue_waiters)
        await trio.testing.wait_all_tasks_blocked()
        with trio.testing.assert_no_checkpoints():
            for target in range(1, 11):
                assert await mark.wait_reached_by(target, trio.current_time() + 5.0) is True
        nursery.cancel_scope.cancel()


async def test_deadline_wait_is_cancellable_and_fails_like_wait_reached():
    mark = Watermark()
    with trio.move_on_after(0.01):
        await mark.wait_reached_by(10, trio.current_time() + 60)
    mark.fail(OSError("gone"))
    with pytest.raises(WatermarkFailed):
        await mark.wait_reached_by(10, trio.current_time() + 60)


async def test_deadline_waits_hold_even_without_a_reaper_task(autojump_clock):
    """Forgetting expire_overdue_waiters costs speed, never a deadline (issue 22, item 6)."""
    mark = Watermark()
    start = trio.current_time()
    assert await mark.wait_reached_by(10, start + 3.0) is False
    assert trio.current_time() == start + 3.0

    async def advance_soon() -> None:
        await trio.sleep(1.0)
        mark.advance(10)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(advance_soon)
        assert await mark.wait_reached_by(10, trio.current_time() + 5.0) is True
