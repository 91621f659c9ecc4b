"""The router's request meter: every request is observed once, by request code, response code
and result, whatever its handler does (answers, answers nothing, raises, is refused, is
unknown, is oneway), and a grouped run is observed per request."""

from __future__ import annotations

from types import SimpleNamespace

from wire.remoting import RemotingCommand, Router
from wire.remoting.command import FLAG_ONEWAY
from wire.remoting.metering import MAX_ROWS, RequestMeter

CONNECTION = SimpleNamespace(peer="127.0.0.1:1")


async def answer(connection, request):
    return request.response(0)


async def nothing(connection, request):
    return None


async def broken(connection, request):
    raise RuntimeError("boom")


async def grouped(connection, requests):
    return [request.response(0) for request in requests]


def rows(meter: RequestMeter) -> dict[tuple[int, int, str], int]:
    return {(f.request_code, f.response_code, f.result): f.count for f in meter.figures()}


async def test_each_kind_of_outcome_is_counted_once_with_its_result():
    meter = RequestMeter("broker")
    router = Router(meter=meter)
    router.register(10, answer)
    router.register(11, nothing)
    router.register(12, broken)
    router.register(13, answer)
    router.guards.append(lambda connection, request: request.response(16) if request.code == 13 else None)
    for code in (10, 10, 11, 12, 13, 99):
        await router.handle(CONNECTION, RemotingCommand.request(code))
    oneway = RemotingCommand.request(10)
    oneway.flag = FLAG_ONEWAY
    await router.handle(CONNECTION, oneway)
    assert rows(meter) == {
        (10, 0, "success"): 2,
        (11, -1, "success"): 1,  # answered nothing although a response was expected
        (12, 1, "process_request_failed"): 1,  # SYSTEM_ERROR
        (13, 16, "success"): 1,  # refused by the guard: NO_PERMISSION
        (-1, 3, "success"): 1,  # code 99, unknown: REQUEST_CODE_NOT_SUPPORTED under one label
        (10, -1, "oneway"): 1,
    }
    (figures,) = [f for f in meter.figures() if f.request_code == 12]
    assert len(figures.counts) == 10 and figures.total_seconds >= 0  # 9 bounds and +Inf


async def test_a_group_is_observed_per_request():
    meter = RequestMeter("broker")
    router = Router(meter=meter)
    router.register(310, answer)
    router.register_group(310, grouped)
    await router.handle_group(CONNECTION, [RemotingCommand.request(310) for _ in range(3)])
    assert rows(meter) == {(310, 0, "success"): 3}


async def test_unknown_codes_share_one_label_set_and_label_sets_are_bounded():
    meter = RequestMeter("broker")
    router = Router(meter=meter)
    router.register(10, answer)
    for code in range(100_000, 110_000):
        await router.handle(CONNECTION, RemotingCommand.request(code))
    assert rows(meter) == {(-1, 3, "success"): 10_000}
    for response_code in range(5000):  # a plugin answering ever new codes
        meter.observe(10, response_code, "success", 0.001)
    assert len(meter.figures()) == MAX_ROWS + 1  # and the one set the rest fold into
    assert rows(meter)[(-1, -1, "success")] == 5000 - (MAX_ROWS - 1)
