"""How long a blocking request polls for its answer (:mod:`trocket.client.answer_spin`): the
rules, fed answer delays directly (no clock involved), and a :class:`BlockingConnection` that
polls against scripted peers: answers read while polling or after it, a late answer backing
off, and what goes wrong on the way (a timeout, a broken frame, the peer closing) handled as
without polling."""

from __future__ import annotations

import socket
import time

import pytest

from tests.client.test_blocking_producer import scripted_peer
from tests.interop.conftest import RunningBroker
from trocket import BlockingProducer, Message, SendStatus
from trocket.client import answer_spin
from trocket.client.answer_spin import SPINNERS, AnswerSpin
from trocket.client.blocking_connection import BlockingConnection
from wire.remoting import RemotingCommand, RequestCode
from wire.remoting.busy_poll import AUTO_WINDOW, MAX_BACK_OFF, MAX_WINDOW, STRETCH
from wire.remoting.command import FrameDecoder


def polled_requests(spin: AnswerSpin, count: int) -> int:
    """How many of ``count`` requests would poll (each answered at once)."""
    polled = 0
    for _ in range(count):
        window = spin.begin()
        polled += window > 0
        spin.finish(None)  # no answer: nothing learnt, the slot given back
    return polled


def test_settings():
    assert AnswerSpin.from_setting(0) is None and AnswerSpin.from_setting("off") is None
    adaptive = AnswerSpin.from_setting("auto")
    assert adaptive is not None and adaptive.adaptive and adaptive.answer_window == AUTO_WINDOW
    fixed = AnswerSpin.from_setting("300us")
    assert fixed is not None and not fixed.adaptive and fixed.answer_window == pytest.approx(300e-6)
    with pytest.raises(ValueError, match='busy_poll must be "auto", "off" or a duration'):
        AnswerSpin.from_setting("fast")
    with pytest.raises(ValueError, match='busy_poll must be "auto"'):
        BlockingProducer("PG", "127.0.0.1:9876", busy_poll="fast")
    with pytest.raises(ValueError, match='busy_poll must be "auto"'):  # before any connecting
        BlockingConnection("127.0.0.1:1", busy_poll="fast")


def test_an_answer_a_little_late_stretches_the_window_a_much_later_one_backs_off():
    spin = AnswerSpin(AUTO_WINDOW, adaptive=True)
    assert spin.begin() == AUTO_WINDOW
    spin.finish(0.0004)  # a sync-flush put: polling through it pays
    assert spin.answer_window == pytest.approx(0.0004 * STRETCH) and spin.late == 0
    spin.begin()
    spin.finish(0.0002)
    assert spin.hits == 1 and spin.answer_window == pytest.approx(0.0004 * STRETCH)  # kept

    # Polled answers too late to poll for: the window goes back to its base and the next 1, 2,
    # 4 ... requests sleep, at most MAX_BACK_OFF of them, before one polls again. Answers the
    # sleeping requests get late change nothing (their lateness includes a wake-up).
    slept = []
    for _ in range(8):
        assert spin.begin() > 0
        spin.finish(MAX_WINDOW * 2)
        assert spin.answer_window == AUTO_WINDOW and spin.sleeping
        count = 0
        while spin.sleeping and count <= MAX_BACK_OFF:
            assert spin.begin() == 0
            spin.finish(MAX_WINDOW * 2)
            count += 1
        slept.append(count)
    assert slept == [1, 2, 4, 8, 16, 32, MAX_BACK_OFF, MAX_BACK_OFF] and spin.late == 8

    # An answer soon enough for a stretched window, even one slept through, clears it.
    assert spin.begin() > 0
    spin.finish(MAX_WINDOW * 2)
    assert spin.begin() == 0
    spin.finish(MAX_WINDOW / STRETCH)
    assert polled_requests(spin, 5) == 5 and spin.answer_window == pytest.approx(MAX_WINDOW)


def test_a_fixed_window_always_polls_its_length():
    spin = AnswerSpin(300e-6)
    for waited in (0.0001, 0.0005, 0.5):
        window = spin.begin()
        assert window == pytest.approx(300e-6)
        spin.finish(waited)
    assert spin.answer_window == pytest.approx(300e-6) and polled_requests(spin, 3) == 3


def test_at_most_half_the_cores_of_threads_poll_at_once():
    spins = [AnswerSpin(AUTO_WINDOW, adaptive=True) for _ in range(SPINNERS + 1)]
    windows = [spin.begin() for spin in spins]
    assert windows[:SPINNERS] == [AUTO_WINDOW] * SPINNERS and windows[SPINNERS] == 0
    spins[SPINNERS].finish(None)
    spins[0].finish(0.0001)  # a slot back: the next request polls again
    assert spins[SPINNERS].begin() == AUTO_WINDOW
    for spin in (*spins[1:SPINNERS], spins[SPINNERS]):
        spin.finish(None)
    assert answer_spin.spinner_slots.free() == SPINNERS  # every slot given back


def echo(delays: list[float]):
    """A peer answering each request after the next of ``delays`` (seconds)."""

    def script(peer: socket.socket, decoder: FrameDecoder) -> None:
        for delay in delays:
            requests: list[RemotingCommand] = []
            while not requests:
                data = peer.recv(65536)
                if not data:
                    return
                requests += decoder.feed(data)
            time.sleep(delay)
            peer.sendall(requests[0].response(0, {"n": requests[0].ext["n"]}).encode())

    return script


def test_a_polling_connection_reads_its_answers_and_sleeps_through_late_ones():
    """Quick answers are read while polling; 50 ms ones are too late (the requests after one
    sleep); quick answers after them are polled for again. Bounds, not exact counts: a loaded
    machine delays some quick answers past the window too."""
    quick, slow = 40, 3
    with scripted_peer(echo([0.0] * quick + [0.05] * slow + [0.0] * quick), forked=True) as (address, _):
        connection = BlockingConnection(address, busy_poll="auto")
        spin = connection.spin
        assert spin is not None

        def ask(n: int) -> None:
            request = RemotingCommand.request(RequestCode.HEART_BEAT, {"n": str(n)})
            assert connection.invoke(request, 5).ext["n"] == str(n)

        try:
            for n in range(quick):
                ask(n)
            hits_before = spin.hits
            for n in range(quick, quick + slow):
                ask(n)
            assert spin.late >= 1 and spin.hits == hits_before  # slept through, not caught
            for n in range(quick + slow, 2 * quick + slow):
                ask(n)
        finally:
            connection.close()
    # At least a quarter of the first quick run read while polling: on a loaded 2-core machine
    # the peer waits for a core, and a third of the quick answers were measured later than the
    # window. After the late ones, polling must resume; how many of the quick answers it then
    # catches depends on the load as well (each one the window misses doubles the windows passed
    # up: a loaded suite's run caught 2 of 40), so any catch shows it.
    assert hits_before >= quick // 4
    assert spin.hits > hits_before, "polling resumed after the late answers"
    assert answer_spin.spinner_slots.free() == SPINNERS


@pytest.mark.parametrize("busy_poll", ["auto", "50ms"])
def test_a_timeout_while_polling_leaves_the_connection_usable(busy_poll):
    """The request's whole timeout passes while (and after) it polls: the caller gets its
    timeout, the slot goes back, and the next request gets its own answer."""
    with scripted_peer(echo([0.3, 0.0])) as (address, _):
        connection = BlockingConnection(address, busy_poll=busy_poll)
        try:
            with pytest.raises(Exception, match="in time"):
                connection.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, {"n": "1"}), 0.1)
            assert answer_spin.spinner_slots.free() == SPINNERS
            answer = connection.invoke(RemotingCommand.request(RequestCode.HEART_BEAT, {"n": "2"}), 5)
            assert answer.ext["n"] == "2"
        finally:
            connection.close()


def test_a_broken_frame_or_the_peer_closing_while_polling_costs_the_connection():
    def break_the_stream(peer: socket.socket, decoder: FrameDecoder) -> None:
        peer.recv(65536)
        peer.sendall(b"\x00\x00\x00\x02\x00\x00\x00\x00")
        time.sleep(0.5)

    def close_at_once(peer: socket.socket, decoder: FrameDecoder) -> None:
        peer.recv(65536)

    for script, error in ((break_the_stream, "broken frame"), (close_at_once, "closed the connection")):
        with scripted_peer(script) as (address, _):
            connection = BlockingConnection(address, busy_poll="1s")  # polls through it all
            with pytest.raises(Exception, match=error):
                connection.invoke(RemotingCommand.request(RequestCode.HEART_BEAT), 5)
            assert connection.closed and answer_spin.spinner_slots.free() == SPINNERS


def test_a_producer_polls_for_the_brokers_answers(broker: RunningBroker):
    with BlockingProducer("PG_blocking_polls", broker.namesrv) as producer:
        results = [producer.send(Message("BlockingPolls", b"x")) for _ in range(100)]
        pool = producer._pool
        assert pool is not None
        (connection,) = pool._idle[broker.broker]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert connection.spin is not None and connection.spin.hits > 0
    with BlockingProducer("PG_blocking_sleeps", broker.namesrv, busy_poll=0) as producer:
        producer.send(Message("BlockingPolls", b"x"))
        pool = producer._pool
        assert pool is not None
        assert all(c.spin is None for idle in pool._idle.values() for c in idle)
