"""The store's flush thread: fast calls are waited for by blocking, slow ones never hold the
event loop for longer than the block limit."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from plugins.store_mmap.flush_thread import BLOCK_LIMIT, FlushThread
from tests.plugins.store_mmap.helpers import loop_gaps_while


@pytest.fixture
def flusher():
    thread = FlushThread()
    yield thread
    thread.close()


async def test_results_and_exceptions_come_back_in_the_caller(flusher):
    assert await flusher.run(lambda a, b: a + b, 2, 3) == 5
    assert await flusher.run(threading.current_thread) is not threading.current_thread()

    def failing() -> None:
        raise OSError("EIO")

    with pytest.raises(OSError, match="EIO"):
        await flusher.run(failing)
    assert await flusher.run(lambda: "still serving") == "still serving"


async def test_a_fast_call_is_waited_for_by_blocking(flusher):
    """Each is, unless a loaded machine was slower than the block limit to wake the thread (and
    then the policy rightly awaits the next few): up to 200 calls for one to be blocked for."""
    calls = 0
    while calls < 200 and not flusher.waits.blocked:
        await flusher.run(lambda: None)
        calls += 1
    assert flusher.waits.blocked == 1
    assert flusher.waits.blocked + flusher.waits.awaited == calls


async def test_a_slow_call_holds_the_event_loop_no_longer_than_the_block_limit(flusher):
    """While a call sleeps 0.3 s, another task keeps running: the loop was blocked for at most
    about ``BLOCK_LIMIT``, not for the call."""

    async def slow() -> None:
        assert await flusher.run(time.sleep, 0.3) is None

    gaps = await loop_gaps_while(slow)
    assert flusher.waits.awaited == 1
    assert len(gaps) > 50, "the ticker ran while the call slept"
    assert max(gaps) < 0.1


async def test_while_calls_run_slow_the_loop_does_not_block_at_all(flusher):
    await flusher.run(time.sleep, 0.05)
    assert flusher.waits.recent_seconds > BLOCK_LIMIT
    await flusher.run(lambda: None)
    assert flusher.waits.awaited == 2 and flusher.waits.blocked == 0


async def test_a_cancelled_caller_still_waits_for_its_call_to_finish(flusher):
    """The store's flushed position depends on the call having finished: as with
    ``trio.to_thread.run_sync``, cancellation does not abandon it."""
    finished = []

    def slow() -> str:
        time.sleep(0.1)
        finished.append(True)
        return "done"

    with trio.move_on_after(0.01):
        assert await flusher.run(slow) == "done"
    assert finished == [True]


def test_close_stops_the_thread_after_the_submitted_calls():
    thread = FlushThread(name="trocket-flush-test")
    assert any(t.name == "trocket-flush-test" for t in threading.enumerate())
    thread.close()
    assert not any(t.name == "trocket-flush-test" for t in threading.enumerate())
