"""A proxy beside its broker answers POP, acks and invisible-time changes in process (no
loopback remoting round trip), with the answers the broker's port gives: an ack removes the
message from flight, a second ack of the same handle is refused, a changed invisible time
holds the message back."""

from __future__ import annotations

import trio

from plugins.proxy import PROXY
from tests.plugins.proxy.test_bad_calls import create_topic, message
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb


def receive_request(topic: str, group: str = "CG_local") -> spb.ReceiveMessageRequest:
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=8,
        invisible_duration={"seconds": 2},
        long_polling_timeout={"seconds": 1},
    )


def ack_request(topic: str, received: pb.Message, group: str = "CG_local") -> spb.AckMessageRequest:
    system = received.system_properties
    return spb.AckMessageRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name=topic),
        entries=[spb.AckMessageEntry(message_id=system.message_id, receipt_handle=system.receipt_handle)],
    )


async def test_pops_acks_and_invisible_time_changes_are_answered_in_process(proxy_cluster):
    async with proxy_cluster() as (cluster, caller):
        service = cluster.broker.ctx.stash[PROXY]
        await create_topic(cluster, "Local")
        for n in range(2):
            sent = await caller.call(
                "SendMessage", spb.SendMessageRequest(messages=[message("Local", f"m{n}".encode(), f"ID{n}")])
            )
            assert sent.status.code == pb.OK

        received: list[pb.Message] = []
        for _ in range(8):  # the messages went to two queues; a receive may take one queue's
            answers = await caller.receive(receive_request("Local"))
            received += [a.message for a in answers if a.HasField("message")]
            if len(received) == 2:
                break
        received.sort(key=lambda m: m.body)
        assert sorted(m.body for m in received) == [b"m0", b"m1"]
        served = service.core.served_in_process
        assert served >= 1  # the POP

        first, second = received
        acked = await caller.call("AckMessage", ack_request("Local", first))
        assert acked.status.code == pb.OK
        again = await caller.call("AckMessage", ack_request("Local", first))
        assert again.status.code != pb.OK  # the broker's refusal of a handle already acked

        change = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="CG_local"),
            topic=pb.Resource(name="Local"),
            receipt_handle=second.system_properties.receipt_handle,
            message_id=second.system_properties.message_id,
            invisible_duration={"seconds": 30},
        )
        changed = await caller.call("ChangeInvisibleDuration", change)
        assert changed.status.code == pb.OK and changed.receipt_handle

        # After the first invisible time (2 s) neither comes back: one acked, one held 30 s.
        await trio.sleep(2.5)
        assert not [a for a in await caller.receive(receive_request("Local")) if a.HasField("message")]
        figures = service.figures()
        assert int(figures["proxyInProcessRequests"]) == service.core.served_in_process >= served + 3
