"""A MessagingService that answers without doing anything: the ceiling of ``bench/grpc_proxy.py``.

Served by the proxy's own gRPC host (grpcio's C-core driven from trio, as ``trocket up`` serves
it) with handlers that return prebuilt answers: SendMessage an OK entry, ReceiveMessage a batch
of ready messages, AckMessage OK. No broker, no store, no translation. What the bench's load
generator reaches against it is the most any server built on grpcio can give that load
generator on this machine: if half the remoting rate is above it, no change to the proxy can
meet issue 35's target here, and the bench says so.

    python bench/grpc_noop_server.py PORT BODY_SIZE    (prints "ready" once it serves)
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from plugins.proxy.completion_queue_host import CompletionQueueHost  # noqa: E402
from plugins.proxy.grpc_host import Method  # noqa: E402
from wire.grpc_v2 import definition_pb2 as pb  # noqa: E402
from wire.grpc_v2 import service_pb2 as spb  # noqa: E402

SERVICE = "apache.rocketmq.v2.MessagingService"
BATCH = 32
"""Messages a ReceiveMessage answers with: the bench asks for batches of 32."""


def canned_answers(body_size: int) -> tuple[Any, list[Any], Any]:
    """The answers every call gets: a send's, a receive's stream, an ack's."""
    ok = pb.Status(code=pb.OK, message="OK")
    sent = spb.SendMessageResponse(
        status=ok,
        entries=[spb.SendResultEntry(status=ok, message_id=uuid.uuid4().hex.upper(), offset=1)],
    )
    messages = [
        spb.ReceiveMessageResponse(
            message=pb.Message(
                topic=pb.Resource(name="BenchGrpc"),
                body=b"x" * body_size,
                system_properties=pb.SystemProperties(
                    message_id=uuid.uuid4().hex.upper(),
                    receipt_handle=f"noop-{index}",
                    delivery_attempt=1,
                    body_encoding=pb.IDENTITY,
                    message_type=pb.NORMAL,
                ),
            )
        )
        for index in range(BATCH)
    ]
    received = [spb.ReceiveMessageResponse(status=ok), *messages]
    acked = spb.AckMessageResponse(status=ok)
    return sent, received, acked


async def serve(port: int, body_size: int) -> None:
    sent, received, acked = canned_answers(body_size)

    async def send_message(request: Any, metadata: Any, peer: str) -> Any:
        return sent

    async def receive_message(request: Any, metadata: Any, peer: str) -> Any:
        return received

    async def ack_message(request: Any, metadata: Any, peer: str) -> Any:
        return acked

    methods = [
        Method("SendMessage", spb.SendMessageRequest, spb.SendMessageResponse, send_message),
        Method(
            "ReceiveMessage",
            spb.ReceiveMessageRequest,
            spb.ReceiveMessageResponse,
            receive_message,
            server_stream=True,
        ),
        Method("AckMessage", spb.AckMessageRequest, spb.AckMessageResponse, ack_message),
    ]
    host = CompletionQueueHost(SERVICE, methods, f"127.0.0.1:{port}")
    async with trio.open_nursery() as nursery:
        await nursery.start(host.serve)
        print("ready", flush=True)


def main() -> None:
    port, body_size = int(sys.argv[1]), int(sys.argv[2])
    trio.run(serve, port, body_size)


if __name__ == "__main__":
    main()
