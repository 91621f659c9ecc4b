"""Bad gRPC calls get RocketMQ's status codes, in a gRPC-OK answer, and the proxy keeps serving:
a missing client id, an unknown topic, a malformed receipt handle, oversize and malformed
messages, unsigned and unauthorized calls with ACL on, methods Trocket does not serve."""

from __future__ import annotations

import grpc
import pytest
import trio

from tests.plugins.acl.conftest import ACL_FILE
from trocket import tls_context
from wire.grpc_v2 import definition_pb2 as pb
from wire.grpc_v2 import service_pb2 as spb
from wire.remoting import RequestCode
from wire.remoting.signature import SessionCredentials


async def create_topic(cluster, topic: str, credentials: SessionCredentials | None = None) -> None:
    cluster.client.credentials = credentials
    created = await cluster.call(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
    )
    assert created.code == 0, created.remark
    await trio.sleep(0.3)  # registered with the NameServer by the table's change event


def message(topic: str, body: bytes = b"hello", message_id: str = "01ABCDEF", **system) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(message_id=message_id, message_type=pb.NORMAL, **system),
    )


async def test_business_errors_are_rocketmq_statuses(proxy_cluster):
    async with proxy_cluster(proxy={"max_body_size": "1KiB"}) as (cluster, caller):
        route = spb.QueryRouteRequest(topic=pb.Resource(name="TBW102"))
        nameless = await caller.call("QueryRoute", route, client_id=False)
        assert nameless.status.code == pb.CLIENT_ID_REQUIRED
        unknown = await caller.call(
            "QueryRoute", spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic"))
        )
        assert unknown.status.code == pb.TOPIC_NOT_FOUND and "NoSuchTopic" in unknown.status.message

        await create_topic(cluster, "Orders")
        sent = await caller.call("SendMessage", spb.SendMessageRequest(messages=[message("Orders")]))
        assert sent.status.code == pb.OK and sent.entries[0].message_id == "01ABCDEF"
        huge = await caller.call(
            "SendMessage", spb.SendMessageRequest(messages=[message("Orders", b"x" * 2000)])
        )
        assert huge.status.code == pb.MESSAGE_BODY_TOO_LARGE
        no_id = await caller.call(
            "SendMessage", spb.SendMessageRequest(messages=[message("Orders", message_id="")])
        )
        assert no_id.status.code == pb.ILLEGAL_MESSAGE_ID
        reserved = message("Orders")
        reserved.user_properties["UNIQ_KEY"] = "mine"
        assert (
            await caller.call("SendMessage", spb.SendMessageRequest(messages=[reserved]))
        ).status.code == (pb.ILLEGAL_MESSAGE_PROPERTY_KEY)
        bad_tag = message("Orders", tag="a|b")
        assert (await caller.call("SendMessage", spb.SendMessageRequest(messages=[bad_tag]))).status.code == (
            pb.ILLEGAL_MESSAGE_TAG
        )
        fifo_without_group = message("Orders")
        fifo_without_group.system_properties.message_type = pb.FIFO
        conflict = await caller.call("SendMessage", spb.SendMessageRequest(messages=[fifo_without_group]))
        assert conflict.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE

        ack = spb.AckMessageRequest(
            group=pb.Resource(name="CG"),
            topic=pb.Resource(name="Orders"),
            entries=[spb.AckMessageEntry(message_id="01ABCDEF", receipt_handle="not a handle")],
        )
        acked = await caller.call("AckMessage", ack)
        assert acked.status.code == pb.INVALID_RECEIPT_HANDLE
        assert acked.entries[0].status.code == pb.INVALID_RECEIPT_HANDLE

        receive = spb.ReceiveMessageRequest(
            group=pb.Resource(name="CG"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders"), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=16,
            invisible_duration={"seconds": 0, "nanos": 1000},
        )
        (refused,) = await caller.receive(receive)
        assert refused.status.code == pb.ILLEGAL_INVISIBLE_TIME

        with pytest.raises(grpc.RpcError) as raised:
            await caller.call("UpdateOffset", spb.UpdateOffsetRequest())
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED

        receive.invisible_duration.seconds = 30
        receive.long_polling_timeout.seconds = 1
        answers = await caller.receive(receive)
        assert answers[0].status.code == pb.OK and answers[1].message.body == b"hello"
        assert answers[-1].HasField("delivery_timestamp")


async def test_acl_refuses_unsigned_and_unauthorized_calls(proxy_cluster, tmp_path):
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    inner = {"inner_access_key": "admin-key", "inner_secret_key": "admin-secret"}  # the proxy's own account
    async with proxy_cluster(plugins=["acl"], acl={"plain_acl_file": str(acl_file)}, broker=inner) as (
        cluster,
        caller,
    ):
        await create_topic(cluster, "Orders", SessionCredentials("admin-key", "admin-secret"))
        request = spb.SendMessageRequest(messages=[message("Orders")])
        unsigned = await caller.call("SendMessage", request)
        assert unsigned.status.code == pb.UNAUTHORIZED and "not signed" in unsigned.status.message
        caller.credentials = ("writer-key", "wrong-secret")
        assert (await caller.call("SendMessage", request)).status.code == pb.UNAUTHORIZED
        caller.credentials = ("reader-key", "12345678")
        forbidden = await caller.call("SendMessage", request)
        assert forbidden.status.code == pb.FORBIDDEN and "needs PUB" in forbidden.status.message
        caller.credentials = ("writer-key", "writer-secret")
        assert (await caller.call("SendMessage", request)).status.code == pb.OK


async def test_enforcing_tls_serves_grpc_over_tls_only(proxy_cluster, pki):
    tls = {"tls_server_mode": "enforcing", "tls_server_cert_path": str(pki["server"]), "tls_enable": True}
    tls["tls_server_key_path"] = str(pki["server"])
    async with proxy_cluster(broker=tls, client_tls=tls_context(pki["ca"])) as (cluster, caller):
        route = spb.QueryRouteRequest(topic=pb.Resource(name="TBW102"))

        def over_tls() -> spb.QueryRouteResponse:
            credentials = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
            with grpc.secure_channel(caller.address, credentials) as channel:
                call = channel.unary_unary(
                    "/apache.rocketmq.v2.MessagingService/QueryRoute",
                    request_serializer=spb.QueryRouteRequest.SerializeToString,
                    response_deserializer=spb.QueryRouteResponse.FromString,
                )
                return call(route, metadata=caller.metadata(), timeout=10)

        answer = await trio.to_thread.run_sync(over_tls)
        assert answer.status.code == pb.OK and answer.message_queues
        with pytest.raises(grpc.RpcError) as plain:
            await caller.call("QueryRoute", route)
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE
