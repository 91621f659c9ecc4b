"""A master's periodic registration sends the topic table only when a NameServer lacks its
current data version: otherwise a QUERY_DATA_VERSION keeps it alive there (RocketMQ's
``needRegister``). A topic change still registers at once."""

from __future__ import annotations

import trio

from wire.remoting import RequestCode, ResponseCode


async def test_unchanged_topics_are_not_sent_again_and_the_broker_stays_routed(cluster_factory):
    async with cluster_factory(
        remoting={"register_period": "100ms"},
        namesrv={"broker_expiry": "600ms", "scan_interval": "50ms"},
    ) as cluster:
        registration = cluster.network.registration
        assert registration is not None
        created = await cluster.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": "Kept", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
        )
        assert created.code == ResponseCode.SUCCESS
        await trio.sleep(0.3)
        registered = registration.registrations
        await trio.sleep(1.5)  # more than twice the expiry: alive through the queries alone
        assert registration.registrations == registered, "nothing changed: no table sent"
        assert registration.refreshes >= 8
        route = await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Kept"})
        assert route.code == ResponseCode.SUCCESS, route.remark

        # A change registers at once, whatever the period.
        created = await cluster.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": "Added", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
        )
        with trio.fail_after(5):
            while registration.registrations == registered:  # noqa: ASYNC110 - polls a counter
                await trio.sleep(0.02)
        route = await cluster.call_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Added"})
        assert route.code == ResponseCode.SUCCESS, route.remark
