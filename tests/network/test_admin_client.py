"""trocket.admin.AdminClient against an in-process NameServer + broker."""

from __future__ import annotations

import pytest

from tests.network.test_broker_consumers import heartbeat
from tests.network.wire import send_request
from trocket.admin import AdminClient, AdminError
from wire.remoting import RequestCode


async def test_admin_reads_messages_progress_and_connections(cluster_factory):
    async with cluster_factory(store="mmap") as cluster:
        for i in range(3):
            await cluster.call_raw(send_request("AdminTopic", f"m{i}".encode(), queue_id=0, keys=f"k{i}"))
        await cluster.call_raw(heartbeat("client-1", "AG"))
        await cluster.call(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "AG", "topic": "AdminTopic", "queueId": 0, "commitOffset": 1},
        )
        await cluster.broker.wait_dispatched()
        async with AdminClient.open([cluster.namesrv_addr]) as admin:
            message = await admin.message_at("AdminTopic", "broker-a", 0, 2)
            assert message is not None and message.body == b"m2"
            assert await admin.message_at("AdminTopic", "broker-a", 0, 3) is None
            rows = [r for r in await admin.consumer_progress("AG") if r["topic"] == "AdminTopic"]
            assert rows[0]["brokerOffset"] == 3 and rows[0]["consumerOffset"] == 1 and rows[0]["diff"] == 2
            info = await admin.consumer_connection("AG")
            assert [c["clientId"] for c in info["connectionSet"]] == ["client-1"]
            assert info["subscriptionTable"]["TopicLive"]["subString"] == "TagA||TagC"
            assert info["messageModel"] == "CLUSTERING" and info["consumeType"] == "CONSUME_PASSIVELY"
            with pytest.raises(AdminError, match="not an offset message id"):
                await admin.view_message("nonsense")
            with pytest.raises(AdminError, match="has no route"):
                await admin.route("Nowhere")
