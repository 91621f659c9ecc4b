"""An in-process broker + NameServer + gRPC proxy on free loopback ports, and a grpcio client
that calls it as RocketMQ 5 clients do (blocking calls run in a thread: the broker shares the
test's trio loop)."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import grpc
import pytest
import trio

from plugins.proxy import PROXY
from tests.network.conftest import Cluster, cluster_factory  # noqa: F401
from wire.grpc_v2 import service_pb2 as spb

SERVICE = "/apache.rocketmq.v2.MessagingService/"
RESPONSES = {
    "QueryRoute": spb.QueryRouteResponse,
    "Heartbeat": spb.HeartbeatResponse,
    "SendMessage": spb.SendMessageResponse,
    "AckMessage": spb.AckMessageResponse,
    "ChangeInvisibleDuration": spb.ChangeInvisibleDurationResponse,
    "EndTransaction": spb.EndTransactionResponse,
    "QueryAssignment": spb.QueryAssignmentResponse,
    "ForwardMessageToDeadLetterQueue": spb.ForwardMessageToDeadLetterQueueResponse,
    "NotifyClientTermination": spb.NotifyClientTerminationResponse,
    "UpdateOffset": spb.UpdateOffsetResponse,
}


@attrs.define
class GrpcCaller:
    address: str
    client_id: str = attrs.field(factory=lambda: f"test@{uuid.uuid4().hex[:8]}")
    credentials: tuple[str, str] | None = None

    def metadata(self, *, client_id: bool = True) -> list[tuple[str, str]]:
        now = time.strftime("%Y%m%dT%H%M%SZ")
        out = [("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2"), ("x-mq-date-time", now)]
        if client_id:
            out.append(("x-mq-client-id", self.client_id))
        if self.credentials is not None:
            key, secret = self.credentials
            signature = hmac.new(secret.encode(), now.encode(), hashlib.sha1).hexdigest()
            out.append(
                (
                    "authorization",
                    f"MQv2-HMAC-SHA1 Credential={key}, SignedHeaders=x-mq-date-time, Signature={signature}",
                )
            )
        return out

    def _unary(self, method: str, request: Any, client_id: bool) -> Any:
        with grpc.insecure_channel(self.address) as channel:
            call = channel.unary_unary(
                SERVICE + method,
                request_serializer=type(request).SerializeToString,
                response_deserializer=RESPONSES[method].FromString,
            )
            return call(request, metadata=self.metadata(client_id=client_id), timeout=10)

    async def call(self, method: str, request: Any, *, client_id: bool = True) -> Any:
        return await trio.to_thread.run_sync(self._unary, method, request, client_id)

    def _receive(self, request: Any) -> list[Any]:
        with grpc.insecure_channel(self.address) as channel:
            call = channel.unary_stream(
                SERVICE + "ReceiveMessage",
                request_serializer=type(request).SerializeToString,
                response_deserializer=spb.ReceiveMessageResponse.FromString,
            )
            return list(call(request, metadata=self.metadata(), timeout=30))

    async def receive(self, request: Any) -> list[Any]:
        return await trio.to_thread.run_sync(self._receive, request)


@pytest.fixture
def proxy_cluster(cluster_factory) -> Callable[..., Any]:  # noqa: F811
    """``async with proxy_cluster(**tables) as (cluster, caller)``."""

    @asynccontextmanager
    async def factory(**tables: Any) -> AsyncIterator[tuple[Cluster, GrpcCaller]]:
        plugins = ["pop", "proxy", "retry_dlq", *tables.pop("plugins", [])]
        proxy = {"grpc_port": 0, "min_invisible_time": "1s", **tables.pop("proxy", {})}
        broker = {"roles": ["broker", "namesrv", "proxy"], **tables.pop("broker", {})}
        async with cluster_factory(plugins=plugins, broker=broker, proxy=proxy, **tables) as cluster:
            service = cluster.broker.ctx.stash[PROXY]
            yield cluster, GrpcCaller(f"127.0.0.1:{service.port}")

    return factory
