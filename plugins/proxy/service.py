"""The proxy service: the gRPC MessagingService of RocketMQ 5 on ``[proxy] grpc_port``, answered by
talking remoting to the brokers the NameServers name.

It runs wherever the ``proxy`` role is hosted: beside a broker (``trocket up``) or alone
(``trocket proxy -n NAMESRV``); either way it reaches brokers over remoting, as RocketMQ's
proxy does in cluster mode. Methods the official clients do not use (PullMessage,
UpdateOffset, GetOffset, QueryOffset, RecallMessage, SyncLiteSubscription) answer gRPC
UNIMPLEMENTED with a message.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import grpc
import trio

from kernel.access import ACCESS_CONTROL
from kernel.config import Config
from kernel.context import BrokerRuntime, StashKey
from kernel.errors import ConfigError
from kernel.providers import flatten
from kernel.tls_config import client_tls, inner_credentials, server_files
from plugins.proxy import consuming, producing, routing
from plugins.proxy.auth import authorize
from plugins.proxy.completion_queue_host import CompletionQueueHost
from plugins.proxy.config import ProxyConfig
from plugins.proxy.consuming import Renewals
from plugins.proxy.core import ProxyCore
from plugins.proxy.grpc_host import BidiStream, GrpcHost, Method, RpcAbort
from plugins.proxy.status import ProxyProblem
from trocket.client.routes import RouteCache
from wire.grpc_v2 import service_pb2 as spb
from wire.remoting import Connection, RemotingClient, RemotingCommand, RequestCode, Router
from wire.remoting.tls import ClientAuth, TlsMode

log = logging.getLogger(__name__)

PROXY = StashKey["ProxyService"]("proxy.service")
SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
HOUSEKEEPING_INTERVAL = 1.0
PRODUCER_HEARTBEAT_INTERVAL = 10.0

Handler = Callable[[ProxyCore, Any, Mapping[str, str], str], Awaitable[Any]]


@attrs.define
class ProxyStatistics:
    calls: dict[str, int] = attrs.field(factory=dict)
    refused: int = 0
    renewed: int = 0


Needs = Callable[[Any], tuple[dict[str, str], dict[str, str]]]
"""What a call touches, for ACL: (topic → PUB/SUB, group → SUB)."""


def _nothing(request: Any) -> tuple[dict[str, str], dict[str, str]]:
    return {}, {}


def _consuming(request: Any) -> tuple[dict[str, str], dict[str, str]]:
    topic = request.message_queue.topic if hasattr(request, "message_queue") else request.topic
    return {topic.name: "SUB"}, {request.group.name: "SUB"}


NEEDS: dict[str, Needs] = {
    "SendMessage": lambda request: ({m.topic.name: "PUB" for m in request.messages}, {}),
    "EndTransaction": lambda request: ({request.topic.name: "PUB"}, {}),
    "QueryAssignment": _consuming,
    "ReceiveMessage": _consuming,
    "AckMessage": _consuming,
    "ChangeInvisibleDuration": _consuming,
    "ForwardMessageToDeadLetterQueue": _consuming,
}
"""Calls not listed only need a valid signature when ACL is on (routes, heartbeats, ...)."""


def _checked(core: ProxyCore, name: str, request: Any, metadata: Mapping[str, str], peer: str) -> None:
    access = core.access_control()
    if access is None:
        return  # no ACL: nothing to work out per call
    topics, groups = NEEDS.get(name, _nothing)(request)
    authorize(access, metadata, peer, topics=topics, groups=groups)


def _answered(
    core: ProxyCore, stats: ProxyStatistics, name: str, handler: Handler, response_type: Any
) -> Any:
    """A trio handler, checked by ACL, whose :class:`ProxyProblem` becomes the response's status."""

    async def call(request: Any, metadata: Mapping[str, str], peer: str) -> Any:
        stats.calls[name] = stats.calls.get(name, 0) + 1
        try:
            _checked(core, name, request, metadata, peer)
            return await handler(core, request, metadata, peer)
        except ProxyProblem as problem:
            stats.refused += 1
            return response_type(status=problem.status())

    return call


def _streamed(core: ProxyCore, stats: ProxyStatistics, name: str, handler: Handler) -> Any:
    async def call(request: Any, metadata: Mapping[str, str], peer: str) -> list[Any]:
        stats.calls[name] = stats.calls.get(name, 0) + 1
        try:
            _checked(core, name, request, metadata, peer)
            return list(await handler(core, request, metadata, peer))
        except ProxyProblem as problem:
            stats.refused += 1
            return [spb.ReceiveMessageResponse(status=problem.status())]

    return call


def _unimplemented(name: str) -> Any:
    async def call(request: Any, metadata: Mapping[str, str], peer: str) -> Any:
        raise RpcAbort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not served by Trocket's proxy (POP is)")

    return call


def methods(core: ProxyCore, stats: ProxyStatistics) -> list[Method]:
    unary = {
        "QueryRoute": (routing.query_route, spb.QueryRouteRequest, spb.QueryRouteResponse),
        "Heartbeat": (routing.heartbeat, spb.HeartbeatRequest, spb.HeartbeatResponse),
        "SendMessage": (producing.send_message, spb.SendMessageRequest, spb.SendMessageResponse),
        "QueryAssignment": (
            routing.query_assignment,
            spb.QueryAssignmentRequest,
            spb.QueryAssignmentResponse,
        ),
        "AckMessage": (consuming.ack_message, spb.AckMessageRequest, spb.AckMessageResponse),
        "ForwardMessageToDeadLetterQueue": (
            consuming.forward_to_dead_letter_queue,
            spb.ForwardMessageToDeadLetterQueueRequest,
            spb.ForwardMessageToDeadLetterQueueResponse,
        ),
        "EndTransaction": (producing.end_transaction, spb.EndTransactionRequest, spb.EndTransactionResponse),
        "NotifyClientTermination": (
            routing.notify_client_termination,
            spb.NotifyClientTerminationRequest,
            spb.NotifyClientTerminationResponse,
        ),
        "ChangeInvisibleDuration": (
            consuming.change_invisible_duration,
            spb.ChangeInvisibleDurationRequest,
            spb.ChangeInvisibleDurationResponse,
        ),
    }
    out = [
        Method(name, request, response, _answered(core, stats, name, handler, response))
        for name, (handler, request, response) in unary.items()
    ]
    out.append(
        Method(
            "ReceiveMessage",
            spb.ReceiveMessageRequest,
            spb.ReceiveMessageResponse,
            _streamed(core, stats, "ReceiveMessage", consuming.receive_message),
            server_stream=True,
        )
    )
    out.append(
        Method(
            "Telemetry",
            spb.TelemetryCommand,
            spb.TelemetryCommand,
            BidiStream(
                functools.partial(routing.telemetry_open, core),
                functools.partial(routing.telemetry_receive, core),
                functools.partial(routing.telemetry_close, core),
            ),
        )
    )
    unserved = {
        "PullMessage": (spb.PullMessageRequest, spb.PullMessageResponse, True),
        "UpdateOffset": (spb.UpdateOffsetRequest, spb.UpdateOffsetResponse, False),
        "GetOffset": (spb.GetOffsetRequest, spb.GetOffsetResponse, False),
        "QueryOffset": (spb.QueryOffsetRequest, spb.QueryOffsetResponse, False),
        "RecallMessage": (spb.RecallMessageRequest, spb.RecallMessageResponse, False),
        "SyncLiteSubscription": (spb.SyncLiteSubscriptionRequest, spb.SyncLiteSubscriptionResponse, False),
    }
    out += [
        Method(name, request, response, _unimplemented(name), server_stream=stream)
        for name, (request, response, stream) in unserved.items()
    ]
    return out


@attrs.define(eq=False)
class ProxyService:
    """See the module docstring."""

    runtime: BrokerRuntime
    config: ProxyConfig
    stats: ProxyStatistics = attrs.field(factory=ProxyStatistics)
    core: ProxyCore | None = None
    port: int = 0

    @property
    def address(self) -> str:
        host = self.core.advertised[0] if self.core else self.config.grpc_host
        return f"{host}:{self.port}"

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        ctx = self.runtime.ctx
        namesrvs = list(self.config.namesrv_addr or ctx.broker.namesrv_addr)
        router = Router(name="proxy")
        router.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)
        async with RemotingClient.open(
            router, credentials=inner_credentials(ctx.config), tls=client_tls(ctx.config)
        ) as remoting:
            beside = self.runtime if "broker" in ctx.broker.roles else None
            core = ProxyCore(
                self.config,
                remoting,
                RouteCache(remoting, namesrvs, timeout=self.config.request_timeout),
                advertised=(self.config.grpc_host, self.config.grpc_port),
                renewals=Renewals(),
                access_control=lambda: ctx.stash.get(ACCESS_CONTROL, None),
                local=beside,
                in_process=_in_process(beside) if beside is not None else {},
            )
            self.core = core
            host_type = CompletionQueueHost if self.config.grpc_server == "completion_queue" else GrpcHost
            host = host_type(
                SERVICE_NAME,
                methods(core, self.stats),
                f"{self.config.grpc_host}:{self.config.grpc_port}",
                options=[
                    ("grpc.max_receive_message_length", self.config.max_body_size * 4 + (1 << 20)),
                    ("grpc.max_send_message_length", -1),
                ],
                credentials=grpc_credentials(ctx.config),
            )
            async with trio.open_nursery() as nursery:
                self.port = await nursery.start(host.serve)
                core.advertised = _advertised(self.config, self.port)
                log.info(
                    "proxy: gRPC on %s:%d, advertised as %s", self.config.grpc_host, self.port, self.address
                )
                nursery.start_soon(self._housekeeping, core)
                task_status.started()

    async def _on_check(self, connection: Connection, request: RemotingCommand) -> RemotingCommand | None:
        if self.core is not None:
            await producing.on_check(self.core, connection, request)
        return None

    async def _housekeeping(self, core: ProxyCore) -> None:
        """Renew auto-renewed messages, forget silent clients, re-announce producer topics."""
        since_heartbeat = PRODUCER_HEARTBEAT_INTERVAL
        while True:
            await trio.sleep(HOUSEKEEPING_INTERVAL)
            self.stats.renewed += await consuming.renew_due(core)
            core.clients.expire(self.config.client_expiry)
            since_heartbeat += HOUSEKEEPING_INTERVAL
            if since_heartbeat >= PRODUCER_HEARTBEAT_INTERVAL:
                since_heartbeat = 0
                await core.producers_changed()

    def figures(self) -> dict[str, str]:
        figures = {
            "proxyGrpcAddress": self.address if self.port else "",
            "proxyClients": str(len(self.core.clients.sessions)) if self.core else "0",
            "proxyRefusedCalls": str(self.stats.refused),
            "proxyRenewals": str(self.stats.renewed),
            "proxyInProcessRequests": str(self.core.served_in_process) if self.core else "0",
        }
        puts = self.core.local_puts if self.core else None
        if puts is not None:
            figures["proxyLocalPuts"] = str(puts.puts)
            figures["proxyLocalPutGroups"] = str(puts.groups)
        for name, count in sorted(self.stats.calls.items()):
            figures[f"proxyCalls_{name}"] = str(count)
        if self.port:
            figures["grpcUrl"] = self.address
        return figures


def _in_process(runtime: BrokerRuntime) -> dict[int, Callable[[RemotingCommand], Awaitable[Any]]]:
    """The broker's request handlers that answer without a connection, by code (see
    ``RequestHandlerSpec.in_process``)."""
    ctx = runtime.ctx
    return {
        spec.code: functools.partial(spec.in_process, runtime)
        for spec in flatten(ctx.hook.trocket_register_request_handlers(ctx=ctx))
        if spec.in_process is not None
    }


def grpc_credentials(config: Config) -> grpc.ServerCredentials | None:
    """TLS on the gRPC port when ``tls_server_mode`` is ``enforcing`` (the broker's certificate
    and key; ``tls_server_need_client_auth = "require"`` asks clients for theirs). grpcio serves
    one or the other on a port, so ``permissive`` stays plaintext, which is what the official
    clients dial unless told to use TLS.

    :raises ConfigError: a file cannot be read, or the key is encrypted (grpcio cannot open one).
    """
    files = server_files(config)
    if files is None or files.mode is not TlsMode.ENFORCING:
        return None
    if files.key_password:
        raise ConfigError(
            config.source, "[broker] tls_server_key_password", "the gRPC proxy needs an unencrypted key file"
        )
    try:
        key, cert = files.key.read_bytes(), files.cert.read_bytes()
        trust = files.trust.read_bytes() if files.trust is not None else None
    except OSError as error:
        raise ConfigError(
            config.source, "[broker] tls_server_*", f"cannot read {error.filename}: {error}"
        ) from None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=trust, require_client_auth=files.client_auth is ClientAuth.REQUIRE
    )


def _pem_blocks(data: bytes, kind: bytes) -> bytes:
    """The PEM blocks of ``data`` whose type ends with ``kind`` (a file may hold a key and its
    chain together, as the broker's ``tls_server_*`` files may; grpcio wants them apart)."""
    out, inside = [], False
    for line in data.splitlines(keepends=True):
        if line.startswith(b"-----BEGIN ") and line.rstrip().endswith(kind + b"-----"):
            inside = True
        if inside:
            out.append(line)
        if inside and line.startswith(b"-----END "):
            inside = False
    return b"".join(out)


def _advertised(config: ProxyConfig, port: int) -> tuple[str, int]:
    if config.advertised_address:
        host, _, given = config.advertised_address.rpartition(":")
        return host, int(given)
    host = config.grpc_host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return host, port
